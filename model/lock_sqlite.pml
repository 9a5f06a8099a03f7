/* Lock discipline "sqlite": one writer per database file.
 *
 * Store.write/forget/reauthorize run in LockedBackend.write(): the store's re-entrant lock, then
 * SQLite's BEGIN IMMEDIATE (one write lock per database file, shared by every process). Every
 * write transaction holds the same lock, whatever its targets: `mask` is ignored. */

#define LOCK_DISCIPLINE 1

bit db_writer;   /* the database file's write lock */

inline acquire(mask) { atomic { db_writer == 0 -> db_writer = 1 } }
inline release(mask) { db_writer = 0 }

/* the clock a forget's survey notes before its first read: the committed clock (the writer
 * that takes a version commits it with the clock, under the one lock) */
#define SURVEY_CLOCK clock
