/* A program using LMDB -- a real third-party library that announces its
 * page pool the valgrind way when built with -DUSE_VALGRIND (mdb.c's
 * VGMEMP_* macros: a pool per environment, its dirty pages chunks of it,
 * pages given back to the environment's free list MEMPOOL_FREE'd).  The
 * test builds LMDB's own source (the lmdb sdist from PyPI) twice: against
 * valgrind's header for valgrind, and against ours for libmemleak.
 *
 * Two environments: one used and closed properly (its pool destroyed), one
 * whose write transaction is left open and whose handle is dropped without
 * mdb_env_close -- the leak LMDB users make.  At exit, the pages of the
 * open transaction are chunks of the leaked environment's pool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lmdb.h"

#define CHECK(call)                                                                                   \
    do {                                                                                              \
        int rc_ = (call);                                                                             \
        if (rc_) {                                                                                    \
            fprintf(stderr, "%s: %s\n", #call, mdb_strerror(rc_));                                    \
            exit(2);                                                                                  \
        }                                                                                             \
    } while (0)

static MDB_env *opened(const char *dir)
{
    MDB_env *env;
    mkdir(dir, 0700);
    CHECK(mdb_env_create(&env));
    CHECK(mdb_env_set_mapsize(env, 1 << 24));
    CHECK(mdb_env_open(env, dir, MDB_NOSYNC | MDB_NOTLS, 0600));
    return env;
}

static void put_many(MDB_env *env, MDB_txn *txn, int n, int size)
{
    MDB_dbi dbi;
    char key[32], *value = calloc(1, (size_t)size);
    CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "key-%06d", i);
        memset(value, 'a' + i % 26, (size_t)size);
        MDB_val k = {strlen(key), key}, v = {(size_t)size, value};
        CHECK(mdb_put(txn, dbi, &k, &v, 0));
    }
    free(value);
    (void)env;
}

static __attribute__((noinline)) void site_closed_env(const char *dir)
{
    MDB_env *env = opened(dir);
    for (int round = 0; round < 3; round++) {
        MDB_txn *txn;
        CHECK(mdb_txn_begin(env, NULL, 0, &txn));
        put_many(env, txn, 300, 200);
        CHECK(mdb_txn_commit(txn));
    }
    mdb_env_close(env);
}

static __attribute__((noinline)) MDB_txn *site_forgotten_txn(MDB_env *env)
{
    MDB_txn *txn;
    CHECK(mdb_txn_begin(env, NULL, 0, &txn));
    put_many(env, txn, 200, 300);
    return txn;
}

static __attribute__((noinline)) MDB_env *site_leaked_env(const char *dir)
{
    MDB_env *env = opened(dir);
    MDB_txn *txn;
    CHECK(mdb_txn_begin(env, NULL, 0, &txn));
    put_many(env, txn, 100, 100);
    CHECK(mdb_txn_commit(txn));
    return env;
}

int main(int argc, char **argv)
{
    const char *base = argc > 1 ? argv[1] : ".";
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/closed", base);
    snprintf(b, sizeof b, "%s/leaked", base);
    site_closed_env(a);
    MDB_env *env = site_leaked_env(b);
    MDB_txn *txn = site_forgotten_txn(env);
    printf("left open: %s\n", txn ? "yes" : "no");
    env = NULL; /* dropped: neither closed nor committed */
    txn = NULL;
    return 0;
}
