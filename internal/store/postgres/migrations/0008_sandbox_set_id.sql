-- Whether set-uid programs (sudo) raise privileges in the sandbox: its
-- processes run without no_new_privs and its root filesystem without
-- nosuid. Only E2B's listener sets it, at create; no update changes it.
ALTER TABLE sandboxes ADD COLUMN set_id boolean NOT NULL DEFAULT false;
