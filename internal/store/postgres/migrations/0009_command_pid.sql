-- A command's process ID in its sandbox's pid namespace, as the sandbox's
-- agent reports it when the command starts; 0 when not known (a command
-- stored before this column, or one whose start was not recorded).
ALTER TABLE commands ADD COLUMN pid integer NOT NULL DEFAULT 0;
