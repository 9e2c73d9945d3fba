-- The runtime role `payoutd serve` and `payoutd worker` connect with: it reads and writes rows and
-- runs payoutd's functions, and can neither change the schema, disable the ledger's append-only
-- triggers nor truncate a table (those need the owner, which only `payoutd migrate` uses). Run as
-- the owner after `payoutd migrate`, in payoutd's database; rename `payoutd_runtime` at will and
-- create it first (`CREATE ROLE payoutd_runtime LOGIN PASSWORD '...'`). A test runs this file.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO payoutd_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO payoutd_runtime;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO payoutd_runtime;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO payoutd_runtime;
-- The migrations' own record is read at start (are they all applied?), never written.
REVOKE INSERT, UPDATE, DELETE ON _sqlx_migrations FROM payoutd_runtime;
-- What a later `payoutd migrate` creates is granted the same way.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO payoutd_runtime;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO payoutd_runtime;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO payoutd_runtime;
