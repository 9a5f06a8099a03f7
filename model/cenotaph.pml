/* cenotaph's forget protocol, as the code runs it (see docs/architecture.md, "The model").
 *
 * tests/test_model.py (`make model`) runs spin -a, gcc and ./pan for every lock discipline and
 * scenario, which must verify, and for every control below, which must yield a counterexample.
 *
 * Abstractions: a record is (slot, version) and its state; crypto is a state (LIVE, HIDDEN,
 * DESTROYED: its key is gone); SQL is one atomic step per transaction's reads and one per COMMIT;
 * the disk is what COMMIT and a ledger append make durable. A transaction takes its versions at
 * its start (`ver`: max of the database's clock and the ledger's newest version, as every
 * transaction computes it) and commits them at its end (`clock`); under one lock the two agree
 * at every COMMIT, under finer locks they do not.
 *
 * Bounds: two slots -- A = (scope a, key k) and B = (scope a/b, key k, carrying subject s, the
 * scope's default subject) -- two forgets, one reauthorization token, two owners.
 *
 * Lock discipline (one of lock_sqlite.pml, lock_pg_one.pml, lock_pg_fine.pml): -DPG_ONE,
 * -DPG_FINE, else SQLite.
 * Scenarios: -DSCEN_TOKENS (owners and tokens), -DSCEN_RESTORE (a backup restored, the ledger
 * replayed), -DSCEN_PURGE (background purge and verification; liveness), else the core
 * (group commit, chunked forgets, a forget dying between its ledger append and COMMIT).
 * Controls, the bugs cenotaph had, each of which must fail a property:
 *   -DCONTROL_NEWEST_ONLY        the ledger view keeps only the newest forget of a target
 *   -DCONTROL_CHECK_OUTSIDE_LOCK a write's dominance check runs before its transaction's lock
 *   -DCONTROL_REFORGET_STUCK     a repeated erasure that found nothing never verifies
 *   -DCONTROL_SKIP_LOCK          (pg_fine) a writer skips the lock of its ancestor scope
 * and two that show properties (1) and the finer locks' design have teeth:
 *   -DCONTROL_READ_ROWS_ONLY     a read trusts the rows, not the ledger view
 *   -DNO_SWEEP                   a forget commits without its postcondition (fails under pg_fine)
 */

#if defined(PG_FINE)
#include "lock_pg_fine.pml"
#elif defined(PG_ONE)
#include "lock_pg_one.pml"
#else
#include "lock_sqlite.pml"
#endif

#define NSLOT 2
#define NF 2
#define SLOT_A 0
#define SLOT_B 1

/* tombstone targets (a bit each): scope a, scope a/b, key k's subtree under a and under a/b,
 * subject s */
#define SC_A 1
#define SC_B 2
#define KEY_A 4
#define KEY_B 8
#define SUBJ 16
#define GENERAL 15
#define ALL_TARGETS 31
#define COVER_A 5   /* SC_A | KEY_A */
#define COVER_B 31  /* every target: both scopes, both key subtrees, the subject */

/* which transactions replay the ledger's forgets the database lacks (Ledger.reconcile): under one
 * lock every one; under target locks one that finds such forgets (Ledger.changed, before its
 * locks) takes every lock (store-wide) and replays them, one holding target locks only replays
 * nothing -- another forget may be between its ledger append and its COMMIT (the ledger view
 * decides all the same) */
#if defined(PG_FINE)
inline replay_mask(mask) { atomic { if :: (ledgered & ~applied) != 0 -> mask = ALL_TARGETS :: else -> skip fi } }
inline replay(mask) { if :: mask == ALL_TARGETS -> reconcile() :: else -> skip fi }
#else
inline replay_mask(mask) { skip }
inline replay(mask) { reconcile() }
#endif

#define covers(t, s) (((t) & ((s) == SLOT_A -> COVER_A : COVER_B)) != 0)

/* record states */
#define NONE 0
#define LIVE 1
#define HIDDEN 2
#define DESTROYED 3

/* erasure request states */
#define R_NONE 0
#define R_TOMBSTONED 1
#define R_SHREDDED 2
#define R_PURGED 3
#define R_VERIFIED 4

byte ver;                   /* versions handed out (a transaction takes its versions at its start) */
byte clock;                 /* the committed clock: the newest version committed */

/* the key provider's ledger: authoritative, appended before the database commits */
byte ledgered;              /* forgets appended (a bit per forget) */
byte lf_tgt[NF];            /* the targets its tombstones name */
byte lf_ver[NF];
byte lf_owner[NF];          /* 0: no owner */
bit lf_comp[NF];            /* compliance (else operational: it hides, destroys nothing; the
                             * forgets modelled are compliance ones, as no safety property tells
                             * hidden from destroyed) */
byte pl[4];                 /* its plan: version of slot s's record it forgets, at [f*2+s] (0: none) */
byte lift_gen;              /* lifts: scope a/b's (issue version of the token that lifted it) */
byte lift_sub;              /* and subject s's */
bit tok_granted;            /* the one reauthorization token: issued, */
bit tok_used;               /* used, */
byte tok_issued;            /* its issue version, */
byte tok_owner;             /* and the owner it was issued for (0: none) */

/* the database */
byte rec_ver[NSLOT];
byte rec_st[NSLOT];
byte applied;               /* forgets the database holds (their erasure rows) */
byte rstate[NF];
bit chunk_left[NF];         /* a large plan whose records are still to apply */

/* specification only */
byte committed;             /* forgets committed, or replayed from the ledger */
byte acked[NSLOT];          /* the newest acknowledged write of each slot (0: none) */
byte restores;
byte reopen_gen;            /* newest issue version of a token consumed to lift scope a/b */
byte reopen_sub;            /* and subject s */
bit wdone[2];               /* group commit: the write of writer i has its outcome */

/* -- shared steps -------------------------------------------------------------------------- */

/* apply forget f's plan to the records (ForgetPlan: apply_plan, apply_records) */
inline apply_records(f) {
  if
  :: pl[f*2] != 0 && rec_ver[0] == pl[f*2] && rec_st[0] == LIVE ->
       rec_st[0] = (lf_comp[f] -> DESTROYED : HIDDEN)
  :: else -> skip
  fi;
  if
  :: pl[f*2+1] != 0 && rec_ver[1] == pl[f*2+1] && rec_st[1] == LIVE ->
       rec_st[1] = (lf_comp[f] -> DESTROYED : HIDDEN)
  :: else -> skip
  fi
}

/* the end of a chunked plan (PlanApplier.run): sweep, and apply the plan to what it missed */
inline finish_sweep(f) {
#ifndef NO_SWEEP
  if
  :: covers(lf_tgt[f], 0) && rec_st[0] == LIVE && rec_ver[0] < lf_ver[f] ->
       rec_st[0] = (lf_comp[f] -> DESTROYED : HIDDEN)
  :: else -> skip
  fi;
  if
  :: covers(lf_tgt[f], 1) && rec_st[1] == LIVE && rec_ver[1] < lf_ver[f] ->
       rec_st[1] = (lf_comp[f] -> DESTROYED : HIDDEN)
  :: else -> skip
  fi
#else
  skip
#endif
}

/* Ledger.reconcile: every forget the ledger holds and the database lacks, applied whole (a
 * whole plan passed its postcondition before the ledger got it: its sweep finds nothing) */
inline reconcile() {
  r = 0;
  do
  :: r < NF ->
     if
     :: (ledgered & (1 << r)) && !(applied & (1 << r)) ->
          apply_records(r);
          finish_sweep(r);                /* (a large plan's replay ends as PlanApplier.run does) */
          applied = applied | (1 << r);
          committed = committed | (1 << r);
          chunk_left[r] = 0;
          rstate[r] = (lf_comp[r] -> R_SHREDDED : R_TOMBSTONED)
     :: else -> skip
     fi;
     r++
  :: else -> break
  od
}

/* check_dominance (dominance.decide) of a write to slot s, over the ledger's forgets and lifts:
 * ok = 0 refused, 1 lands, 2 lands consuming the token (usetok: the write presents it) */
inline decide(s, usetok, ok) {
  gen = 0; sub = 0; r = 0;
  do
  :: r < NF ->
     if
     :: (ledgered & (1 << r)) && (lf_tgt[r] & GENERAL) && covers(lf_tgt[r], s) && lf_ver[r] > gen ->
          gen = lf_ver[r]
     :: else -> skip
     fi;
     if
     :: (ledgered & (1 << r)) && (lf_tgt[r] & SUBJ) && s == SLOT_B && lf_ver[r] > sub -> sub = lf_ver[r]
     :: else -> skip
     fi;
     r++
  :: else -> break
  od;
  /* blocking: what no lift reaches (a token for scope a/b lifts slot B's general targets) */
  if
  :: s == SLOT_B && gen <= lift_gen -> gen = 0
  :: else -> skip
  fi;
  if
  :: sub <= lift_sub -> sub = 0
  :: else -> skip
  fi;
  if
  :: gen == 0 && sub == 0 -> ok = 1
  :: else ->
     if
     :: usetok && s == SLOT_B && tok_granted && !tok_used && tok_issued > gen && tok_issued > sub -> ok = 2
     :: else -> ok = 0
     fi
  fi
}

/* a token's use: recorded in the ledger (Ledger.lift) before the write's COMMIT. Property 3: it
 * lifts only forgets made by the owner it was issued for. */
inline consume(gen, sub) {
  tok_used = 1;
  r = 0;
  do
  :: r < NF ->
     if
     :: (ledgered & (1 << r)) && tok_owner != 0 && lf_ver[r] < tok_issued &&
        ((gen != 0 && (lf_tgt[r] & GENERAL) && lf_ver[r] > lift_gen) ||
         (sub != 0 && (lf_tgt[r] & SUBJ) && lf_ver[r] > lift_sub)) ->
          assert(lf_owner[r] == tok_owner)            /* (3) */
     :: else -> skip
     fi;
     r++
  :: else -> break
  od;
  if
  :: gen != 0 -> lift_gen = tok_issued; reopen_gen = tok_issued
  :: else -> skip
  fi;
  if
  :: sub != 0 -> lift_sub = tok_issued; reopen_sub = tok_issued
  :: else -> skip
  fi
}

/* a write lands at version v in slot s (the COMMIT of its transaction) */
inline land(s, v) {
  /* (2) a write racing a forget lands before it (its version is older, and the forget's plan
   * holds it) or fails -- unless a token issued after the forget reopened the target. The
   * first assertion is "or fails", the second "and is forgotten". */
  r = 0;
  do
  :: r < NF ->
     assert(!((ledgered & (1 << r)) && covers(lf_tgt[r], s) && lf_ver[r] < v &&
              !((lf_tgt[r] & GENERAL) && s == SLOT_B && reopen_gen > lf_ver[r]) &&
              !((lf_tgt[r] & SUBJ) && reopen_sub > lf_ver[r])));
     assert(!((ledgered & (1 << r)) && covers(lf_tgt[r], s) && lf_ver[r] > v && pl[r*2+s] != v));
     r++
  :: else -> break
  od;
  rec_ver[s] = v;
  rec_st[s] = LIVE;
  acked[s] = v;
  if :: clock < v -> clock = v :: else -> skip fi
}

/* -- processes ------------------------------------------------------------------------------ */

/* Store.write under GroupCommit: writer i writes slot i. The writer at the head of the queue
 * leads: one transaction for the writes queued (each checked on its own, GroupWriter.write). */
byte q[2];
byte qh;
byte qt;

proctype Writer(byte me) {
  byte r, gen, sub, ok0, ok1, i, n, mask, v0, v1;
  atomic { q[qt] = me; qt++ }
  if
  :: wdone[me] -> goto done            /* a leader committed it, with its outcome */
  :: atomic { !wdone[me] && q[qh] == me ->
       n = qt - qh;                      /* GroupCommit._take: itself and those behind it */
       mask = 0; i = qh;
       do
       :: i < qt -> mask = mask | (q[i] == SLOT_A -> COVER_A : COVER_B); i++
       :: else -> break
       od;
#ifdef CONTROL_SKIP_LOCK
       mask = mask & ~SC_A;              /* the lock of the ancestor scope is skipped */
#endif
       skip }
  fi;
  replay_mask(mask);
#ifdef CONTROL_CHECK_OUTSIDE_LOCK
  d_step { decide(q[qh], 0, ok0); if :: n == 2 -> decide(q[qh+1], 0, ok1) :: else -> ok1 = 0 fi; gen = 0; sub = 0 }
  atomic { acquire(mask); replay(mask); ver++; v0 = ver; ver++; v1 = ver;
#else
  /* the transaction: the ledger view read inside it (Store._commit_writes), each write checked
   * on its own (GroupWriter.write), the accepted ones landing at COMMIT */
  atomic { acquire(mask); replay(mask); ver++; v0 = ver; ver++; v1 = ver;
    decide(q[qh], 0, ok0); if :: n == 2 -> decide(q[qh+1], 0, ok1) :: else -> ok1 = 0 fi;
#endif
    gen = 0; sub = 0; i = 0
  }
  atomic {                               /* COMMIT */
    if :: ok0 -> land(q[qh], v0) :: else -> skip fi;
    if :: n == 2 && ok1 -> land(q[qh+1], v1) :: else -> skip fi;
    release(mask);
    i = qh;                              /* each caller gets its outcome; the next in line leads */
    do
    :: i < qh + n -> wdone[q[i]] = 1; i++
    :: else -> break
    od;
    qh = qh + n
  }
done:
  skip
}

/* Store.forget / forget_subject: plan under the lock, ledger append, COMMIT; a large plan's
 * records in chunks after (PlanApplier). */
proctype Forget(byte f) {
  byte r, t, m, v, s, o, sv, sp0, sp1;
  bit chunked, escaped;
  lf_comp[f] = 1;
#if defined(SCEN_PURGE)
  t = SUBJ;
#elif defined(SCEN_TOKENS)
  if                                     /* forgets of what the token could lift, by either owner */
  :: f == 0 -> t = SC_B
  :: f == 1 -> t = SUBJ
  :: true -> t = SC_A
  fi;
  if
  :: o = 1
  :: o = 2
  fi;
#else
  if
  :: f == 0 -> t = SC_A
  :: f == 0 -> t = KEY_A | KEY_B         /* key k in a/b with include_ancestors */
  :: f == 1 -> t = SC_B
  :: true -> t = SUBJ
  fi;
#endif
  d_step {                               /* ForgetPlanner.survey, outside the lock */
    sv = SURVEY_CLOCK;
    sp0 = ((covers(t, 0) && rec_st[0] == LIVE) -> rec_ver[0] : 0);
    sp1 = ((covers(t, 1) && rec_st[1] == LIVE) -> rec_ver[1] : 0)
  }
  m = t;
  replay_mask(m);
  atomic {
    acquire(m);
    replay(m);
    ver++; v = ver;
    /* ForgetPlanner.plan: what the survey found, and what was written since its clock */
    pl[f*2] = ((covers(t, 0) && rec_st[0] == LIVE && (rec_ver[0] == sp0 || rec_ver[0] > sv)) -> rec_ver[0] : 0);
    pl[f*2+1] = ((covers(t, 1) && rec_st[1] == LIVE && (rec_ver[1] == sp1 || rec_ver[1] > sv)) -> rec_ver[1] : 0);
    escaped = 0; s = 0;                  /* a covered record written before it, not in its plan */
    do
    :: s < NSLOT ->
       escaped = escaped || (covers(t, s) && rec_st[s] == LIVE && rec_ver[s] < v && pl[f*2+s] != rec_ver[s]);
       s++
    :: else -> break
    od;
    if
    :: (pl[f*2] != 0 || pl[f*2+1] != 0) -> chunked = 1   /* a plan larger than chunk_records() */
    :: chunked = 0
    fi;
#ifndef NO_SWEEP
    /* a whole plan's postcondition (Ledger.commit_plan: check_postcondition, sweep) fails the
     * forget closed; a chunked plan's runs after its last chunk (PlanApplier.run) */
    if
    :: escaped && !chunked -> release(m); goto done   /* nothing committed, nothing ledgered */
    :: else -> skip
    fi;
#endif
    /* (1) a write acknowledged before the forget is covered by it (a large plan's, by its last
     * chunk: below) */
    assert(!escaped || chunked);
    sv = 0; sp0 = 0; sp1 = 0; s = 0; escaped = 0;  /* (dead from here: not part of the state) */
    lf_tgt[f] = t; lf_ver[f] = v; lf_owner[f] = o;     /* Ledger.commit_plan: durable before COMMIT */
    ledgered = ledgered | (1 << f)
  }
#if !defined(SCEN_PURGE) && !defined(SCEN_TOKENS) && !defined(SCEN_RESTORE)
  if
  :: f == 0 -> release(m); goto done     /* the process dies before COMMIT: the ledger holds it */
  :: true
  fi;
#endif
  d_step {                               /* COMMIT */
    if
    :: !(applied & (1 << f)) ->          /* (not replayed meanwhile by another process) */
       if
       :: chunked -> chunk_left[f] = 1; rstate[f] = R_TOMBSTONED   /* apply_head */
       :: else -> apply_records(f); rstate[f] = (lf_comp[f] -> R_SHREDDED : R_TOMBSTONED)
       fi;
       applied = applied | (1 << f)
    :: else -> skip
    fi;
    committed = committed | (1 << f);
    if :: clock < v -> clock = v :: else -> skip fi;
    release(m)
  }
  if
  :: chunked ->                          /* PlanApplier.run: the records, in a later transaction */
     atomic {
       acquire(t);
       if
       :: chunk_left[f] -> apply_records(f); chunk_left[f] = 0;
          finish_sweep(f);
          /* (1) ... and by its last chunk, everything it covers written before it */
          assert(!(covers(lf_tgt[f], 0) && rec_st[0] == LIVE && rec_ver[0] < lf_ver[f]));
          assert(!(covers(lf_tgt[f], 1) && rec_st[1] == LIVE && rec_ver[1] < lf_ver[f]));
          rstate[f] = (lf_comp[f] -> R_SHREDDED : R_TOMBSTONED)
       :: else -> skip
       fi;
       release(t)
     }
  :: else -> skip
  fi;
done:
  skip
}

/* Store.read of slot s, in another process: sync (the ledger view), then the row, one snapshot */
proctype Reader(byte s) {
  byte r, before, seen, late, v, st, a, n;
  bit visible;
  atomic { before = committed; seen = ledgered; a = acked[s]; n = restores }
  d_step {
    v = rec_ver[s]; st = rec_st[s]; late = ledgered;
    visible = (st == LIVE);
#ifndef CONTROL_READ_ROWS_ONLY
    r = 0;
    do
    :: r < NF ->
       if
       :: (seen & (1 << r)) && (pl[r*2+s] == v || (covers(lf_tgt[r], s) && lf_ver[r] > v)) ->
            visible = 0                  /* Store._checked: the view's forgotten, _dominated */
       :: else -> skip
       fi;
       r++
    :: else -> break
    od
#endif
  }
  d_step {
    r = 0;
    do
    :: r < NF ->
       /* (1) no read returns a write ordered before a forget that committed */
       assert(!(visible && (before & (1 << r)) && covers(lf_tgt[r], s) && lf_ver[r] > v));
       if
       :: (late & (1 << r)) && covers(lf_tgt[r], s) && lf_ver[r] > a -> a = 0  /* dominated */
       :: else -> skip
       fi;
       r++
    :: else -> break
    od;
    /* (4) no acknowledged, undominated write is lost (a restore returns to its backup) */
    assert(a == 0 || n != restores || (visible && v >= a))
  }
}

#ifdef SCEN_TOKENS
/* Store.reauthorize(scope a/b, subject s, owner=o), then a write of slot B presenting the token
 * (it commits alone). */
proctype Reauthorizer(byte o) {
  byte r, gen, sub, ok, b, newest, v;
  bit refused;
  acquire(COVER_B);
  d_step { reconcile() }
  d_step {                               /* Store._check_own_forgets: every forget it could lift */
    refused = 0;
    if
    :: o != 0 ->
#ifdef CONTROL_NEWEST_ONLY
       b = 1;                            /* the old view: the newest forget of each target only */
       do
       :: b <= SUBJ ->
          newest = NF; r = 0;
          do
          :: r < NF ->
             if
             :: (ledgered & (1 << r)) && (lf_tgt[r] & b) &&
                (newest == NF || lf_ver[r] > lf_ver[newest]) -> newest = r
             :: else -> skip
             fi;
             r++
          :: else -> break
          od;
          if
          :: newest < NF && lf_owner[newest] != o &&
             lf_ver[newest] > ((b & GENERAL) -> lift_gen : lift_sub) -> refused = 1
          :: else -> skip
          fi;
          b = b * 2
       :: else -> break
       od
#else
       r = 0;
       do
       :: r < NF ->
          if
          :: (ledgered & (1 << r)) && lf_owner[r] != o &&
             lf_ver[r] > ((lf_tgt[r] & GENERAL) -> lift_gen : lift_sub) -> refused = 1
          :: else -> skip
          fi;
          r++
       :: else -> break
       od
#endif
    :: else -> skip
    fi;
    if
    :: !refused ->                       /* Ledger.grant: after every logged forget */
       ver++; tok_issued = ver; tok_owner = o; tok_granted = 1
    :: else -> skip
    fi
  }
  release(COVER_B);
  if
  :: refused -> goto done
  :: else -> skip
  fi;
#ifdef CONTROL_SKIP_LOCK
  acquire(COVER_B & ~SC_A);
#else
  acquire(COVER_B);
#endif
  d_step {
    reconcile();
    ver++; v = ver;
    decide(SLOT_B, 1, ok);
    if
    :: ok == 2 -> consume(gen, sub)      /* Ledger.lift, before COMMIT */
    :: else -> skip
    fi
  }
  d_step {                               /* COMMIT */
    if
    :: ok != 0 -> land(SLOT_B, v)
    :: else -> skip
    fi;
#ifdef CONTROL_SKIP_LOCK
    release(COVER_B & ~SC_A)
#else
    release(COVER_B)
#endif
  }
done:
  skip
}
#endif

#ifdef SCEN_RESTORE
/* Store.backup, then restore(): the copy replaces the database and replays the ledger (every
 * forget, whole) before it serves anything */
byte b_ver[NSLOT];
byte b_st[NSLOT];
byte b_applied;

proctype Restore() {
  byte r, s;
  d_step { b_ver[0] = rec_ver[0]; b_ver[1] = rec_ver[1]; b_st[0] = rec_st[0]; b_st[1] = rec_st[1];
           b_applied = applied }
  acquire(ALL_TARGETS);
  d_step {
    rec_ver[0] = b_ver[0]; rec_ver[1] = b_ver[1]; rec_st[0] = b_st[0]; rec_st[1] = b_st[1];
    r = 0;
    do
    :: r < NF ->
       if
       :: (ledgered & (1 << r)) -> apply_records(r); rstate[r] = (lf_comp[r] -> R_SHREDDED : R_TOMBSTONED)
       :: else -> skip
       fi;
       r++
    :: else -> break
    od;
    applied = ledgered; committed = committed | ledgered;
    s = 0;
    do
    :: s < NSLOT -> acked[s] = (rec_st[s] == LIVE -> rec_ver[s] : 0); s++
    :: else -> break
    od;
    restores++
  }
  release(ALL_TARGETS)
}
#endif

#ifdef SCEN_PURGE
/* the background ErasureWorker: a pass finishes chunked plans, purges (Purger.purge), then
 * verifies (Verifier.verify, judge_scan) -- oldest request first */
#define pending(f) ((applied & (1 << (f))) && lf_comp[f] && rstate[f] != R_VERIFIED && !stuck[f])
bit stuck[NF];

proctype Worker() {
  byte r, s, f, e;
  bit found, waits, left;
end:
  do
  :: pending(0) || pending(1) ->
     f = 0;
     do
     :: f < NF ->
        if
        :: pending(f) ->
           acquire(lf_tgt[f]);
           d_step {
             if
             :: chunk_left[f] -> apply_records(f); chunk_left[f] = 0; finish_sweep(f); rstate[f] = R_SHREDDED
             :: else -> skip
             fi;
             if
             :: rstate[f] == R_SHREDDED ->   /* rows removed, WAL truncated, caches cleared */
                s = 0;
                do
                :: s < NSLOT ->
                   if
                   :: pl[f*2+s] != 0 && rec_ver[s] == pl[f*2+s] && rec_st[s] == DESTROYED -> rec_st[s] = NONE
                   :: else -> skip
                   fi;
                   s++
                :: else -> break
                od;
                rstate[f] = R_PURGED
             :: rstate[f] == R_PURGED ->     /* the verifying scan */
                /* what of the target, written before the forget, is still there: nothing */
                s = 0; left = 0;
                do
                :: s < NSLOT ->
                   left = left || (covers(lf_tgt[f], s) && rec_ver[s] < lf_ver[f] &&
                                   (rec_st[s] == LIVE || rec_st[s] == HIDDEN));
                   s++
                :: else -> break
                od;
                assert(!left);
                found = (pl[f*2] != 0 || pl[f*2+1] != 0);
                waits = 0; e = 0;
                do
                :: e < NF ->
                   waits = waits || (e != f && (applied & (1 << e)) && lf_comp[e] && lf_tgt[e] == lf_tgt[f] &&
                                     lf_ver[e] < lf_ver[f] && rstate[e] != R_VERIFIED);
                   e++
                :: else -> break
                od;
#ifdef CONTROL_REFORGET_STUCK
                if
                :: !found -> stuck[f] = 1    /* "took no probes, so a clean scan proves nothing" */
                :: else -> rstate[f] = R_VERIFIED
                fi
#else
                if
                :: found || !waits -> rstate[f] = R_VERIFIED
                :: else -> skip              /* waits for the earlier erasure of its target */
                fi
#endif
             :: else -> skip
             fi
           }
           release(lf_tgt[f])
        :: else -> skip
        fi;
        f++
     :: else -> break
     od
  od
}

/* (5) with no faults, every compliance erasure eventually reaches verified */
ltl verified {
  [] (((committed & 1) -> <> (rstate[0] == R_VERIFIED)) && ((committed & 2) -> <> (rstate[1] == R_VERIFIED)))
}
#endif

init {
  atomic {
    /* what the store held before: one acknowledged record in each slot */
    ver = 2;
    rec_ver[SLOT_A] = 1; rec_st[SLOT_A] = LIVE; acked[SLOT_A] = 1;
    rec_ver[SLOT_B] = 2; rec_st[SLOT_B] = LIVE; acked[SLOT_B] = 2;
#if defined(SCEN_TOKENS)
    run Forget(0); run Forget(1); run Reauthorizer(2); run Reader(SLOT_B)
#elif defined(SCEN_RESTORE)
    run Writer(SLOT_A); run Writer(SLOT_B); run Forget(0); run Restore(); run Reader(SLOT_B)
#elif defined(SCEN_PURGE)
    run Forget(0); run Forget(1); run Writer(SLOT_B); run Worker()
#else
    run Writer(SLOT_A); run Writer(SLOT_B); run Forget(0); run Forget(1);
    if
    :: run Reader(SLOT_A)
    :: run Reader(SLOT_B)
    fi
#endif
  }
}
