/* MEMLEAK_CONFIG: the options, parsed once at start with no allocation.
 * A bad item gets one line on stderr and its default; the program runs on. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "control.h"

struct mlk_config mlk_config = {.collect_at_load = 1, .depth = 16, .signal = SIGUSR1, .exit_timeout_ms = 60000,
                                .route = 1, .fds = 1, .misuse = MLK_MISUSE_REPORT,
                                .quarantine = MLK_QUARANTINE_UNSET};

static int parse_uint(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 18)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 1;
}

/* A number of bytes, with an optional K, M or G (powers of 1024). */
static int parse_size(const char *s, size_t n, uint64_t *out)
{
    unsigned shift = 0;
    if (n > 1) {
        char u = s[n - 1];
        shift = u == 'K' || u == 'k' ? 10 : u == 'M' || u == 'm' ? 20 : u == 'G' || u == 'g' ? 30 : 0;
    }
    if (!parse_uint(s, shift ? n - 1 : n, out) || *out > (1ull << 40) >> shift)
        return 0;
    *out <<= shift;
    return 1;
}

static int parse_signal(const char *s, size_t n)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP},   {"ALRM", SIGALRM},
                 {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"URG", SIGURG}, {"IO", SIGIO},
                 {"PWR", SIGPWR},   {"VTALRM", SIGVTALRM}, {"TERM", SIGTERM}, {"INT", SIGINT},
                 {"QUIT", SIGQUIT}, {"CONT", SIGCONT}, {"NONE", 0}};
    uint64_t num;
    if (parse_uint(s, n, &num))
        return num < 65 ? (int)num : -1;
    if (n > 3 && strncasecmp(s, "SIG", 3) == 0)
        s += 3, n -= 3;
    if (n > 6 && strncasecmp(s, "RTMIN+", 6) == 0 && parse_uint(s + 6, n - 6, &num) &&
        (int)num <= SIGRTMAX - SIGRTMIN)
        return SIGRTMIN + (int)num;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == n && strncasecmp(s, names[i].name, n) == 0)
            return names[i].sig;
    return -1;
}

static int quiet; /* mlk_config_collects_early_with_trailers: a trial parse */

/* The index of value v (n bytes) among `words` (NULL-ended), or -1: an
 * option that takes one of a few words. */
static int choice(const char *v, size_t n, const char *const *words)
{
    for (int i = 0; words[i]; i++)
        if (strlen(words[i]) == n && strncmp(v, words[i], n) == 0)
            return i;
    return -1;
}

static const char *const NO_YES[] = {"no", "yes", NULL};

static void bad_option(const char *opt, size_t n, const char *why)
{
    if (quiet)
        return;
    char buf[256];
    if (n > sizeof buf - 1)
        n = sizeof buf - 1;
    memcpy(buf, opt, n);
    buf[n] = 0;
    mlk_warn("MEMLEAK_CONFIG: ignoring '", buf, why);
}

static const char *skip_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static size_t trimmed_length(const char *p, const char *end)
{
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    return (size_t)(end - p);
}

/* The options that take a value, and what the value is: for "needs ..."
 * when it is missing.  NULL for anything else. */
static const char *value_wanted(const char *key, size_t n)
{
    static const struct {
        const char *name, *wants;
    } known[] = {{"depth", "': needs a number of frames, 1 to 64 (depth=32)"},
                 {"dir", "': needs a path (dir=/tmp/reports)"},
                 {"signal", "': needs a signal name (signal=USR2) or none"},
                 {"unwind", "': needs fast or libgcc"},
                 {"sample", "': needs a mean number of bytes between samples (sample=524288)"},
                 {"track", "': needs trailers or table"},
                 {"exit_timeout", "': needs a number of seconds"},
                 {"scan", "': needs exit (scan=exit)"},
                 {"scan_heuristics", "': needs all, none, valgrind or names joined by + (stdstring+newarray)"},
                 {"listen", "': needs HOST:PORT (listen=0.0.0.0:7070)"},
                 {"alloc_fns", "': needs a regular expression (alloc_fns=^my_alloc|^pool_get$)"},
                 {"route", "': needs yes or no"},
                 {"fds", "': needs yes or no"},
                 {"misuse", "': needs report, hold or no"},
                 {"quarantine", "': needs a number of bytes (quarantine=64M)"},
                 {"record", "': needs all, last or no"},
                 {"record_cap", "': needs a number of bytes (record_cap=1G)"},
                 {"record_keep", "': needs bytes or seconds (record_keep=64M, record_keep=30s)"},
                 {"record_buffer", "': needs a number of bytes (record_buffer=32M)"}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strlen(known[i].name) == n && strncmp(key, known[i].name, n) == 0)
            return known[i].wants;
    return NULL;
}

/* scan_heuristics=all|none|valgrind|NAME+NAME...: the header's
 * scan_heuristics (bit n: heuristic n, libmemleak/daemon/reachability.py).
 * valgrind: its own four, as its `all` (not libmemleak's header one). */
static int parse_heuristics(const char *v, size_t n, uint32_t *out)
{
    static const char *const names[] = {"stdstring", "length64", "newarray", "multipleinheritance", "header"};
    if (n == 3 && strncmp(v, "all", 3) == 0) {
        *out = 0;
        return 1;
    }
    uint32_t bits = MLK_SCAN_HEURISTICS_SET;
    if (n == 4 && strncmp(v, "none", 4) == 0) {
        *out = bits;
        return 1;
    }
    if (n == 8 && strncmp(v, "valgrind", 8) == 0) {
        *out = bits | MLK_SCAN_HEURISTICS_VALGRIND;
        return 1;
    }
    for (size_t at = 0; at < n;) {
        size_t len = 0;
        while (at + len < n && v[at + len] != '+')
            len++;
        int found = 0;
        for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i]) == len && strncmp(v + at, names[i], len) == 0) {
                bits |= 1u << (i + 1);
                found = 1;
            }
        if (!found)
            return 0;
        at += len + 1;
    }
    *out = bits;
    return 1;
}

void mlk_config_parse(const char *cfg, const char *cwd)
{
    if (!cfg) {
        mlk_config.collect_at_load = 1;
        return;
    }
    mlk_config.collect_at_load = 0;
    const char *next = cfg;
    while (*next) {
        /* One item, blanks around it and around its '=' left out
         * ("mtraceinit, depth = 8" is what people write). */
        const char *p = next, *end = next;
        while (*end && *end != ',')
            end++;
        next = *end ? end + 1 : end;
        p = skip_blanks(p, end);
        size_t n = trimmed_length(p, end);
        const char *eq = memchr(p, '=', n);
        size_t key = eq ? trimmed_length(p, eq) : n;
        const char *val = eq ? skip_blanks(eq + 1, p + n) : NULL;
        size_t vn = eq ? (size_t)(p + n - val) : 0;
        uint64_t num;
        int c;
#define KEY(s) (key == sizeof(s) - 1 && strncmp(p, s, key) == 0)
#define VALUE(s) (vn == sizeof(s) - 1 && strncmp(val, s, vn) == 0)
        if (n == 0) {
        } else if ((!val || vn == 0) && value_wanted(p, key)) {
            bad_option(p, n, value_wanted(p, key));
        } else if (KEY("mtraceinit") && !val) {
            mlk_config.collect_at_load = 1;
        } else if (KEY("mtraceinit")) {
            bad_option(p, n, "': mtraceinit takes no value");
        } else if (KEY("depth") && val) {
            if (parse_uint(val, vn, &num) && num >= 1 && num <= MLK_MAX_DEPTH)
                mlk_config.depth = (uint32_t)num;
            else
                bad_option(p, n, "': depth must be 1 to 64; using 16");
        } else if (KEY("dir") && val && vn > 0) {
            size_t used = 0;
            if (val[0] != '/') {
                used = strlen(cwd);
                if (used + 1 < sizeof mlk_config.dir) {
                    memcpy(mlk_config.dir, cwd, used);
                    mlk_config.dir[used++] = '/';
                }
            }
            if (used + vn < sizeof mlk_config.dir) {
                memcpy(mlk_config.dir + used, val, vn);
                mlk_config.dir[used + vn] = 0;
            } else {
                bad_option(p, n, "': path too long; reports go to the working directory");
                mlk_config.dir[0] = 0;
            }
        } else if (KEY("route") && val) {
            if ((c = choice(val, vn, NO_YES)) >= 0)
                mlk_config.route = c;
            else
                bad_option(p, n, "': route is yes or no; using yes");
        } else if (KEY("fds") && val) {
            if ((c = choice(val, vn, NO_YES)) >= 0)
                mlk_config.fds = c;
            else
                bad_option(p, n, "': fds is yes or no; using yes");
        } else if (KEY("misuse") && val) {
            _Static_assert(MLK_MISUSE_OFF == 0 && MLK_MISUSE_REPORT == 1 && MLK_MISUSE_HOLD == 2, "the words' order");
            if ((c = choice(val, vn, (const char *const[]){"no", "report", "hold", NULL})) >= 0)
                mlk_config.misuse = c;
            else
                bad_option(p, n, "': misuse is report, hold or no; using report");
        } else if (KEY("quarantine") && val) {
            if (parse_size(val, vn, &num))
                mlk_config.quarantine = num;
            else
                bad_option(p, n, "': quarantine takes a number of bytes of freed blocks to hold back, "
                                 "K, M or G after it (0 = none)");
        } else if (KEY("record") && val) {
            _Static_assert(MLK_RECORD_OFF == 0 && MLK_RECORD_ALL == 1 && MLK_RECORD_LAST == 2, "the words' order");
            if ((c = choice(val, vn, (const char *const[]){"no", "all", "last", NULL})) >= 0)
                mlk_config.record = c;
            else
                bad_option(p, n, "': record is all (every event, to a file), last (the last ones, in "
                                 "memory) or no; not recording");
        } else if (KEY("record_cap") && val) {
            if (parse_size(val, vn, &num) && num >= (1u << 20))
                mlk_config.record_cap = num;
            else
                bad_option(p, n, "': record_cap takes a number of bytes, 1M or more (record_cap=1G)");
        } else if (KEY("record_keep") && val) {
            if (vn > 1 && val[vn - 1] == 's' && parse_uint(val, vn - 1, &num) && num >= 1 && num <= 86400 * 365) {
                mlk_config.record_keep_ns = num * 1000000000ull;
            } else if (parse_size(val, vn, &num) && num >= (1u << 20)) {
                mlk_config.record_keep_bytes = num;
            } else {
                bad_option(p, n, "': record_keep takes bytes (1M or more: record_keep=64M) or seconds "
                                 "(record_keep=30s)");
            }
        } else if (KEY("record_buffer") && val) {
            if (parse_size(val, vn, &num) && num >= (1u << 20) && num <= (1ull << 32))
                mlk_config.record_buffer = num;
            else
                bad_option(p, n, "': record_buffer takes a number of bytes, 1M to 4G (record_buffer=32M)");
        } else if (KEY("signal") && val) {
            int sig = parse_signal(val, vn);
            if (sig < 0 || sig == SIGKILL || sig == SIGSTOP)
                bad_option(p, n, "': not a signal name; using USR1");
            else
                mlk_config.signal = sig;
        } else if (KEY("unwind") && val) {
            if ((c = choice(val, vn, (const char *const[]){"fast", "libgcc", NULL})) >= 0)
                mlk_unwind_mode = c ? MLK_UNWIND_LIBGCC : MLK_UNWIND_FAST;
            else
                bad_option(p, n, "': unwind is 'fast' or 'libgcc'; using fast");
        } else if (KEY("sample") && val) {
            if (parse_size(val, vn, &num))
                mlk_sample_bytes = num;
            else
                bad_option(p, n, "': sample takes a mean number of bytes between samples, K, M or G "
                                 "after it (0 = record every allocation)");
        } else if (KEY("track") && val) {
            if ((c = choice(val, vn, (const char *const[]){"trailers", "table", NULL})) >= 0)
                mlk_config.track_in_table = c;
            else
                bad_option(p, n, "': track is 'trailers' or 'table'; using trailers");
        } else if (KEY("exit_timeout") && val) {
            if (parse_uint(val, vn, &num) && num <= 86400)
                mlk_config.exit_timeout_ms = (int)num * 1000;
            else
                bad_option(p, n, "': exit_timeout takes seconds (0 to 86400)");
        } else if (KEY("scan_heuristics") && val) {
            if (!parse_heuristics(val, vn, &mlk_config.scan_heuristics))
                bad_option(p, n, "': heuristics are all, none, valgrind, or some of stdstring, length64, "
                                 "newarray, multipleinheritance, header joined by +; using all");
        } else if (KEY("alloc_fns") && val) {
            /* A regular expression the reader compiles (libmemleak/analysis/
             * alloc_layer.py): here only its length. */
            if (vn < sizeof mlk_config.alloc_fns) {
                memcpy(mlk_config.alloc_fns, val, vn);
                mlk_config.alloc_fns[vn] = 0;
            } else {
                bad_option(p, n, "': alloc_fns takes a regular expression of at most 255 characters");
            }
        } else if (KEY("listen") && val) {
            /* HOST:PORT for a remote shell (libmemleak/daemon/remote.py checks it
             * further; here only its shape). */
            const char *colon = NULL;
            for (const char *c = val; c < val + vn; c++)
                if (*c == ':')
                    colon = c;
            if (colon && colon > val && colon + 1 < val + vn && vn < sizeof mlk_config.listen &&
                parse_uint(colon + 1, (size_t)(val + vn - colon - 1), &num) && num < 65536) {
                memcpy(mlk_config.listen, val, vn);
                mlk_config.listen[vn] = 0;
            } else {
                bad_option(p, n, "': listen takes HOST:PORT (listen=0.0.0.0:7070); not listening");
            }
        } else if (KEY("scan") && val) {
            if (VALUE("exit"))
                mlk_config.scan_at_exit = 1;
            else
                bad_option(p, n, "': scan takes exit (a reachability scan in the exit report)");
        } else {
            bad_option(p, n, "': unknown option (known: mtraceinit, depth=N, dir=PATH, "
                             "signal=NAME, unwind=fast|libgcc, sample=BYTES, "
                             "track=trailers|table, exit_timeout=SECONDS, scan=exit, "
                             "scan_heuristics=all|none|valgrind|NAME+NAME, listen=HOST:PORT, route=yes|no, fds=yes|no, misuse=report|hold|no, quarantine=BYTES, alloc_fns=REGEX, "
                             "record=all|last|no, record_cap=BYTES, record_keep=BYTES|SECONDSs, record_buffer=BYTES)");
        }
#undef KEY
#undef VALUE
    }
}

/* Would `cfg` have collection start at load with trailers?  Asked at the
 * first hook call, before the constructor parses for real: the real parser,
 * run quietly, and everything it set put back (a value that merely contains
 * "track" or "sample" -- a report directory's path -- decides nothing). */
int mlk_config_collects_early_with_trailers(const char *cfg)
{
    struct mlk_config saved = mlk_config;
    int unwind = mlk_unwind_mode;
    uint64_t sample = mlk_sample_bytes;
    quiet = 1;
    mlk_config_parse(cfg, "");
    quiet = 0;
    int early = mlk_config.collect_at_load && !mlk_config.track_in_table && !mlk_sample_bytes;
    mlk_config = saved;
    mlk_unwind_mode = unwind;
    mlk_sample_bytes = sample;
    return early;
}
