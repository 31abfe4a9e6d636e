-- Fenced writes that are pipelined with their COMMIT cannot look at a row
-- count before committing. They end in `select stepkey.lease_held(count(*))`
-- over their RETURNING rows instead: unless exactly one row was written, this
-- raises SQLSTATE SKL01 and Postgres turns the COMMIT into a ROLLBACK.
CREATE OR REPLACE FUNCTION stepkey.lease_held(written bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF written <> 1 THEN
    RAISE EXCEPTION 'stepkey: the lease on this key is no longer held' USING ERRCODE = 'SKL01';
  END IF;
  RETURN true;
END
$$;
