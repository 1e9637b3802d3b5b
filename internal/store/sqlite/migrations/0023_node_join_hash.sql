-- The hash of the join nonce a node joined with: a join by name that
-- brings the same nonce again is the same node retrying a join whose
-- answer it never got, answered as the same node; any other join of a
-- live node's name is refused. '' for a node that joined without one.
ALTER TABLE nodes ADD COLUMN join_hash TEXT NOT NULL DEFAULT '';
