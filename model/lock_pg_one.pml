/* Lock discipline "pg_one_lock": PostgreSQL as the backend runs today.
 *
 * Every write transaction begins with pg_advisory_xact_lock(advisory_key(schema)): one lock per
 * store, held to COMMIT or ROLLBACK (a dead connection's is released by the server). Writers of
 * one store are serialised as SQLite serialises them; `mask` is ignored. */

#define LOCK_DISCIPLINE 2

bit advisory;    /* pg_advisory_xact_lock of the store's schema */

inline acquire(mask) { atomic { advisory == 0 -> advisory = 1 } }
inline release(mask) { advisory = 0 }

/* the clock a forget's survey notes before its first read: the committed clock (the writer
 * that takes a version commits it with the clock, under the one lock) */
#define SURVEY_CLOCK clock
