/* Lock discipline "pg_fine": the design the finer PostgreSQL locking is to be checked against.
 *
 * One lock per tombstone target (a scope, a key subtree, a subject). A write transaction takes
 * the lock of every target that covers its records (WriteTargets.tombstone_targets: each prefix
 * scope, each key subtree, each subject); a forget takes the lock of every target its
 * tombstones name; a reauthorization the locks of every target whose forgets its token could
 * lift. Two transactions exclude each other exactly when one could dominate, or be dominated
 * by, the other. Locks are taken in one fixed order (no deadlock), modelled as taking the whole
 * set at once. Reads take no lock (one snapshot). */

#define LOCK_DISCIPLINE 3

byte held;       /* the target locks held now (a bit per target) */

inline acquire(mask) { atomic { (held & (mask)) == 0 -> held = held | (mask) } }
inline release(mask) { held = held & ~(mask) }

/* the clock a forget's survey notes: the committed clock. Transactions on disjoint targets take
 * versions in one order and commit in another, so a version below it may still commit later:
 * what the plan adds as "written since" misses it, and the forget's postcondition (the sweep)
 * is what keeps the forget from committing without it (-DNO_SWEEP shows the escape). */
#define SURVEY_CLOCK clock
