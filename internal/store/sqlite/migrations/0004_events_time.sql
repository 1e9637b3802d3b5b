-- Events expire by age: the expiry finds them by time.
CREATE INDEX events_time ON events (time);
