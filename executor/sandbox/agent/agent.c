/* The executor's in-container agent: PID 1 of every session container.
 *
 *   agent init --listen SOCK --uid U --gid G --workspace DIR --home DIR --state-dir DIR
 *              [--max-frame N] [--detached-buffer N] [--orphan-exit-ms N]
 *   agent bridge --connect SOCK        relay stdin/stdout <-> SOCK (the exec transport)
 *   agent fs-* ...                     file operations (fileops.c)
 *   agent version
 *
 * One single-threaded poll loop serves every host connection, every run's pipes and SIGCHLD (signalfd).
 * The protocol is described in PROTOCOL.md; the codec lives in frame.c.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fileops.h"
#include "frame.h"

#define AGENT_VERSION "0.1.0"
#define MAX_CONNS 64
#define MAX_TASKS 1024
#define MAX_REPORT 64          /* processes listed per orphan/sweep list */
#define CMDLINE_MAX 256
#define READ_CHUNK 65536
#define STDIN_PENDING_MAX (64u << 20)
#define DRAIN_FINAL_MAX (1u << 20) /* bytes read from a pipe at the drain deadline before it is cut */
#define STOP_WAITERS 8
#define TAG_VAR "EXECUTOR_RUN_TAG"
/* Exit codes of `init` besides 0 (swept and done), 1 (start-up or fatal failure) and 2 (usage); see PROTOCOL.md. */
#define EXIT_CAPS 3 /* the capabilities could not be dropped to KILL SETUID SETGID */
#define EXIT_FSID 4 /* the filesystem ids could not be restored after reading a process's environ */
#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* ---------------------------------------------------------------- utilities */

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* Best effort: a closed stderr must not take the agent down. */
    ssize_t w = write(2, line, strnlen(line, sizeof line));
    (void)w;
}

static int64_t now_us(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t now_ms(void) { return now_us() / 1000; }

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || s[0] == '-' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* A growable byte buffer. Growth failures are reported, never fatal. */
struct buf {
    uint8_t *p;
    size_t len, cap;
};

static int buf_reserve(struct buf *b, size_t extra)
{
    if (extra > SIZE_MAX / 2 - b->len)
        return -1;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < need)
        nc *= 2;
    uint8_t *np = realloc(b->p, nc);
    if (np == NULL)
        return -1;
    b->p = np;
    b->cap = nc;
    return 0;
}

static int buf_add(struct buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return -1;
    if (n > 0)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

/* ---------------------------------------------------------------- options and global state */

static struct {
    const char *listen;
    uid_t uid;
    gid_t gid;
    const char *workspace, *home, *state_dir;
    uint32_t max_frame;
    uint64_t detached_buffer;
    uint64_t orphan_exit_ms; /* 0: never. Else: sweep and exit after this long with no host connection. */
    const char *pass_env;    /* comma-separated names the operator set (profile env): passed to commands as-is */
} opt;

static pid_t g_self;
static int g_listen_fd = -1;
static int g_sig_fd = -1;
static char **g_base_env;       /* the allow-listed part of the agent's environ (see init_base_env) */
static size_t g_base_envc;
static int g_has_path;
static uint64_t g_run_counter;
static uint64_t g_task_counter;
static int64_t g_boot_ns;
static struct buf g_fb;         /* the control frame being built */
static int g_fb_bad;            /* an allocation failed while building it */

/* ---------------------------------------------------------------- connections */

struct conn {
    struct conn *next;
    int fd;
    int hello;
    int closing;       /* flush what is queued, then close */
    int64_t closing_deadline;
    int dead;
    uint8_t *in;
    size_t in_len, in_cap;
    struct buf out;
    size_t out_off;
    uint32_t send_max; /* largest frame length we send on this connection */
};

static struct conn *g_conns;
static int g_nconns;

static size_t conn_pending(const struct conn *c) { return c->out.len - c->out_off; }

/* Above this many queued bytes we stop reading the run pipes that feed this connection (backpressure). */
static size_t conn_high(const struct conn *c)
{
    size_t h = 2 * (size_t)c->send_max;
    return h < 262144 ? 262144 : h;
}

/* Past this the host is not reading at all: the connection is dropped rather than grow without bound. */
static size_t conn_hard(const struct conn *c) { return 64u * 1024 * 1024 + 4 * (size_t)c->send_max; }

static void fb_begin(uint8_t type, uint32_t id)
{
    g_fb.len = 0;
    g_fb_bad = 0;
    uint8_t h[FRAME_HDR];
    memset(h, 0, sizeof h);
    h[4] = type;
    put_u32(h + 5, id);
    if (buf_add(&g_fb, h, sizeof h) != 0)
        g_fb_bad = 1;
}

static void fb_tlv(uint8_t tag, const void *v, size_t n)
{
    uint8_t h[TLV_HDR];
    h[0] = tag;
    put_u32(h + 1, (uint32_t)n);
    if (n > UINT32_MAX || buf_add(&g_fb, h, sizeof h) != 0 || buf_add(&g_fb, v, n) != 0)
        g_fb_bad = 1;
}

static void fb_str(uint8_t tag, const char *s) { fb_tlv(tag, s, strlen(s)); }

static void fb_int(uint8_t tag, int64_t v)
{
    uint8_t b[8];
    put_i64(b, v);
    fb_tlv(tag, b, 8);
}

static void fb_proc(uint8_t tag, pid_t pid, const char *cmd)
{
    uint8_t b[8 + CMDLINE_MAX];
    size_t n = strnlen(cmd, CMDLINE_MAX);
    put_i64(b, pid);
    memcpy(b + 8, cmd, n);
    fb_tlv(tag, b, 8 + n);
}

/* Room left in the frame being built for a connection that accepts frames of send_max bytes. */
static size_t fb_room(uint32_t send_max)
{
    size_t limit = (size_t)send_max + FRAME_LEN_BYTES;
    return g_fb.len >= limit ? 0 : limit - g_fb.len;
}

static void conn_kill(struct conn *c);

/* Queue the frame in g_fb on c. */
static void conn_send(struct conn *c)
{
    if (c == NULL || c->dead)
        return;
    if (g_fb_bad || g_fb.len - FRAME_LEN_BYTES > c->send_max) {
        logmsg("executor-agent: dropping a connection: a reply did not fit its frame bound\n");
        conn_kill(c);
        return;
    }
    put_u32(g_fb.p, (uint32_t)(g_fb.len - FRAME_LEN_BYTES));
    if (buf_add(&c->out, g_fb.p, g_fb.len) != 0 || conn_pending(c) > conn_hard(c)) {
        conn_kill(c);
        return;
    }
}

static void send_error(struct conn *c, uint32_t id, const char *code, const char *msg)
{
    fb_begin(T_ERROR, id);
    fb_str(G_CODE, code);
    fb_str(G_MSG, msg);
    conn_send(c);
}

/* ---------------------------------------------------------------- /proc scanning */

struct pstat {
    pid_t pid, ppid, pgrp;
    char state;
    uid_t uid;
    gid_t gid;
    unsigned long long start; /* start time, clock ticks since boot (field 22) */
};

static void read_real_ids(pid_t pid, struct pstat *ps);

static int read_pstat(pid_t pid, struct pstat *ps)
{
    char path[64], data[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    ssize_t n = read(fd, data, sizeof data - 1);
    int ok = n > 0 && fstat(fd, &st) == 0;
    close(fd);
    if (!ok)
        return -1;
    data[n] = '\0';
    /* The command name may contain spaces and parentheses: parse after the last ')'. */
    char *rp = strrchr(data, ')');
    if (rp == NULL || rp[1] == '\0')
        return -1;
    int ppid = 0, pgrp = 0;
    char state = 0;
    unsigned long long start = 0;
    int got = sscanf(rp + 2, "%c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &state,
                     &ppid, &pgrp, &start);
    if (got < 3)
        return -1;
    ps->pid = pid;
    ps->ppid = ppid;
    ps->pgrp = pgrp;
    ps->start = got == 4 ? start : 0;
    ps->state = state;
    ps->uid = st.st_uid;
    ps->gid = st.st_gid;
    if (st.st_uid == 0)
        read_real_ids(pid, ps); /* a non-dumpable process's /proc files are root's whoever runs it */
    return 0;
}

/* A process's real uid and gid from /proc/PID/status (for one whose /proc files the kernel gives to root). */
static void read_real_ids(pid_t pid, struct pstat *ps)
{
    char path[64], data[2048];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, data, sizeof data - 1);
    close(fd);
    if (n <= 0)
        return;
    data[n] = '\0';
    unsigned long uid, gid;
    const char *u = strstr(data, "\nUid:"), *g = strstr(data, "\nGid:");
    if (u != NULL && g != NULL && sscanf(u, "\nUid: %lu", &uid) == 1 && sscanf(g, "\nGid: %lu", &gid) == 1) {
        ps->uid = (uid_t)uid;
        ps->gid = (gid_t)gid;
    }
}

/* A thread group whose leader exited is a zombie by /proc/PID/stat while its other threads run on: alive if any of
 * /proc/PID/task/ is not a zombie. */
static int zombie_but_running(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    if (dir == NULL)
        return 0;
    int alive = 0;
    struct dirent *e;
    while (!alive && (e = readdir(dir)) != NULL) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end != '\0' || tid <= 0 || tid == pid)
            continue;
        char tpath[96], data[512];
        snprintf(tpath, sizeof tpath, "/proc/%d/task/%ld/stat", (int)pid, tid);
        int fd = open(tpath, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, data, sizeof data - 1);
        close(fd);
        if (n <= 0)
            continue;
        data[n] = '\0';
        char *rp = strrchr(data, ')');
        alive = rp != NULL && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X' && rp[2] != '\0';
    }
    closedir(dir);
    return alive;
}

/* Gone for good: a zombie (or dead) thread group with no thread left running. */
static int pstat_gone(const struct pstat *ps)
{
    return (ps->state == 'Z' || ps->state == 'X') && !zombie_but_running(ps->pid);
}

static void read_cmdline(pid_t pid, char *out, size_t outlen)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, outlen - 1);
    close(fd);
    if (n <= 0) {
        out[0] = '\0';
        return;
    }
    while (n > 0 && out[n - 1] == '\0')
        n--;
    for (ssize_t i = 0; i < n; i++)
        if (out[i] == '\0' || out[i] == '\n')
            out[i] = ' ';
    out[n] = '\0';
}

/* Whether setfsuid/setfsgid work here: this runsc answers them ENOSYS (asking with -1 changes nothing and returns
 * the current id, which is the effective one). */
static int fsids_work(void)
{
    static int known = -1;
    if (known < 0)
        known = (uid_t)setfsuid((uid_t)-1) == geteuid() && (gid_t)setfsgid((gid_t)-1) == getegid();
    return known;
}

/* Take a command's ids to open one of its files, or (`back`) return to ours; 0 when the ids in force are verified to
 * be the ones asked for. setfsuid/setfsgid return the previous id whether or not they succeeded: a second call with
 * the same id returns the id now in force, which is how a switch is verified. Where setfsuid is missing the
 * effective ids are switched instead: the real and saved ids stay ours (0), so switching back needs no capability,
 * and the kernel copies the permitted capabilities back into the effective set when the effective uid returns to 0.
 * The group goes first on the way out (CAP_SETGID is gone once the effective uid is not 0), last on the way back. */
static int switch_ids(uid_t uid, gid_t gid, int back)
{
    if (fsids_work()) {
        setfsgid(gid);
        setfsuid(uid);
        return (uid_t)setfsuid(uid) == uid && (gid_t)setfsgid(gid) == gid ? 0 : -1;
    }
    if (back) {
        if (seteuid(uid) != 0 || setegid(gid) != 0)
            return -1;
    } else if (setegid(gid) != 0 || seteuid(uid) != 0) {
        return -1;
    }
    return geteuid() == uid && getegid() == gid ? 0 : -1;
}

static void shutdown_all(void);

/* Whether /proc/PID/environ holds the exact entry NUL "EXECUTOR_RUN_TAG=tag" NUL.
 * The file is mode 0400 owned by the process and guarded by a ptrace check: the agent keeps neither
 * DAC_OVERRIDE nor SYS_PTRACE, so it opens it with its ids switched to the process's own. */
static int environ_has(const struct pstat *ps, const char *needle, size_t nlen)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)ps->pid);
    uid_t my_uid = geteuid();
    gid_t my_gid = getegid();
    int fd = -1;
    if (switch_ids(ps->uid, ps->gid, 0) == 0)
        fd = open(path, O_RDONLY | O_CLOEXEC);
    if (switch_ids(my_uid, my_gid, 1) != 0) {
        /* Every file the agent touches from here on would be checked against a command's ids: stop (the session
         * ends with its processes) rather than run with an identity that is not ours. */
        logmsg("executor-agent: cannot restore the filesystem ids to %d:%d: exiting\n", (int)my_uid, (int)my_gid);
        if (fd >= 0)
            close(fd);
        shutdown_all();
        _exit(EXIT_FSID);
    }
    if (fd < 0)
        return 0;
    static uint8_t chunk[65536 + 128];
    size_t carry = 1;
    chunk[0] = '\0'; /* the first entry is preceded by a virtual NUL */
    int found = 0;
    size_t scanned = 0;
    for (;;) {
        ssize_t n = read(fd, chunk + carry, 65536);
        if (n <= 0)
            break;
        size_t have = carry + (size_t)n;
        scanned += (size_t)n;
        if (memmem(chunk, have, needle, nlen) != NULL) {
            found = 1;
            break;
        }
        /* Keep the tail so a match across two reads is still seen. */
        carry = nlen - 1 < have ? nlen - 1 : have;
        memmove(chunk, chunk + have - carry, carry);
        if (scanned > (8u << 20)) /* environ is bounded by ARG_MAX-ish sizes; stop on anything larger */
            break;
    }
    close(fd);
    return found;
}

typedef int (*pid_visit)(const struct pstat *ps, void *arg);

/* Visit every process but the agent; -1 when /proc cannot be listed (nothing visited). */
static int for_each_proc(pid_visit visit, void *arg)
{
    DIR *d = opendir("/proc");
    if (d == NULL) {
        logmsg("executor-agent: cannot open /proc: %s\n", strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 0 || pid == g_self)
            continue;
        struct pstat ps;
        if (read_pstat((pid_t)pid, &ps) != 0)
            continue;
        if (visit(&ps, arg) != 0)
            break;
    }
    closedir(d);
    return 0;
}

struct proc {
    pid_t pid;
    char cmd[CMDLINE_MAX];
};

/* A set of processes found or killed. Every pid is remembered (`all`, sorted), so membership, killing and the count
 * never depend on the report cap; only the first MAX_REPORT added are listed with their command lines (`v`). */
struct plist {
    struct proc *v; /* listed: the first MAX_REPORT added */
    int n, cap;
    pid_t *all; /* every pid added, sorted */
    int nall, acap;
    int total; /* how many were added: the true count, also past the listing (and past a failed allocation) */
};

/* Whether `pid` is in the set; `*at` is where it is or would go in `all`. */
static int plist_find(const struct plist *l, pid_t pid, int *at)
{
    int lo = 0, hi = l->nall;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (l->all[mid] < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    *at = lo;
    return lo < l->nall && l->all[lo] == pid;
}

static int plist_has(const struct plist *l, pid_t pid)
{
    int at;
    return plist_find(l, pid, &at);
}

/* Add `pid` once (a second add changes nothing). Listed with `cmd` (NULL: read from /proc now) while the listing has
 * room. The set grows with the processes found, which the kernel bounds (pid_max, the container's pids limit); if it
 * cannot grow, the pid is still counted, only not remembered. */
static void plist_add_cmd(struct plist *l, pid_t pid, const char *cmd)
{
    int at;
    if (plist_find(l, pid, &at))
        return;
    l->total++;
    int remembered = 1;
    if (l->nall == l->acap) {
        int nc = l->acap ? l->acap * 2 : 64;
        pid_t *na = realloc(l->all, (size_t)nc * sizeof *na);
        if (na == NULL) {
            remembered = 0;
        } else {
            l->all = na;
            l->acap = nc;
        }
    }
    if (remembered) {
        memmove(l->all + at + 1, l->all + at, (size_t)(l->nall - at) * sizeof *l->all);
        l->all[at] = pid;
        l->nall++;
    }
    if (l->n >= MAX_REPORT)
        return;
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 8;
        struct proc *nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (nv == NULL)
            return;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n].pid = pid;
    if (cmd != NULL)
        snprintf(l->v[l->n].cmd, CMDLINE_MAX, "%s", cmd);
    else
        read_cmdline(pid, l->v[l->n].cmd, CMDLINE_MAX);
    l->n++;
}

static void plist_free(struct plist *l)
{
    free(l->v);
    free(l->all);
    memset(l, 0, sizeof *l);
}

/* ---------------------------------------------------------------- runs and tasks */

struct ring {
    int fd;
    uint64_t total; /* bytes ever written */
    uint64_t floor; /* bytes before this offset are gone even if the ring could hold them (a write failed) */
};

struct waiter {
    struct conn *conn;
    uint32_t id;
};

struct run {
    struct run *next;
    struct conn *conn;     /* foreground: the requesting connection (NULL once it is gone) */
    uint32_t id;           /* foreground: the run id on conn */
    int detached;          /* a background task */
    char task_id[32];
    char desc[CMDLINE_MAX];
    pid_t pid;             /* direct child, also the process group and session id */
    int out_fd, err_fd, in_fd;
    struct buf in_buf;     /* stdin waiting for the pipe */
    size_t in_off;
    int in_eof;
    int64_t start_us, deadline_ms, grace_ms, drain_ms;
    int kill_orphans;
    int exited;
    int status;
    struct rusage ru;
    int64_t drain_end_ms;
    int killing;           /* we decided to kill the group before the child exited */
    const char *kill_cause;
    int kill_sent;         /* SIGKILL went out */
    int64_t kill_at_ms;
    int drain_cut;
    uint64_t bytes[2];
    struct ring ring[2];
    unsigned long long start_ticks; /* the shell's start time (/proc stat field 22); 0 unknown */
    int alone;                      /* no other run or task was live at any time during this one */
    unsigned long long alone_until; /* alone only until then (another run started while this one was being
                                       killed or was draining); 0: no bound */
    char tag[64];
    const char *shell;
    uint64_t oom_before;
    uint64_t pids_max_before;
    uint64_t pids_max_hits; /* fork refusals at the pids limit during the run (cgroup pids.events "max") */
    int finished;
    int remove;            /* foreground: free at the end of this loop iteration */
    const char *cause;
    int64_t duration_us;
    struct plist left, killed;
    struct waiter waiters[STOP_WAITERS];
};

static struct run *g_runs;
static int g_kept_leftovers; /* a run or task that keeps its leftovers left some: no run has the session alone */
static unsigned long long g_kept_since; /* the earliest start (clock ticks) among those runs and tasks; 0 unknown */
/* Runs or tasks overlapped since the session was last quiet (no run or task live): an untagged daemon one of them
 * started could not be told apart while another was live, and is killed when the session goes quiet (quiet_sweep). */
static int g_shared;
static int g_shared_unsure;                /* one of them keeps its leftovers, or its start time is unknown */
static unsigned long long g_shared_since;  /* the earliest start (clock ticks) among them */

/* `o` overlaps another run or task: it joins the shared period. */
static void share(const struct run *o)
{
    if (!g_shared || o->start_ticks < g_shared_since)
        g_shared_since = o->start_ticks;
    g_shared = 1;
    if (!o->kill_orphans || o->start_ticks == 0)
        g_shared_unsure = 1;
}
static int g_ntasks;

/* The counter `key` ("name ") at the start of a line of the first readable cgroup file among v2 then v1 paths. */
static uint64_t read_cgroup_counter(const char *v2, const char *v1, const char *key)
{
    const char *paths[] = {v2, v1};
    size_t klen = strlen(key);
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        char data[8192]; /* memory.stat is a few KiB; a key past the end reads as 0 */
        ssize_t n = read(fd, data, sizeof data - 1);
        close(fd);
        if (n <= 0)
            continue;
        data[n] = '\0';
        char *p = data;
        while ((p = strstr(p, key)) != NULL) {
            if (p == data || p[-1] == '\n')
                return strtoull(p + klen, NULL, 10);
            p += klen;
        }
    }
    return 0;
}

static uint64_t read_oom_kills(void)
{
    /* cgroup v2 (memory.events) first, then v1 (memory.oom_control); both carry "oom_kill N". */
    return read_cgroup_counter("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control",
                               "oom_kill ");
}

static uint64_t read_pids_max_events(void)
{
    /* "max N": how many forks the pids controller refused at pids.max (v2 and v1 alike). */
    return read_cgroup_counter("/sys/fs/cgroup/pids.events", "/sys/fs/cgroup/pids/pids.events", "max ");
}

static uint64_t read_shmem_bytes(void)
{
    /* tmpfs and /dev/shm pages charged to the container: they stay after the OOM killer freed the processes. */
    return read_cgroup_counter("/sys/fs/cgroup/memory.stat", "/sys/fs/cgroup/memory/memory.stat", "shmem ");
}

static void signal_group(struct run *r, int sig)
{
    if (r->pid <= 1)
        return;
    if (killpg(r->pid, sig) != 0 && errno != ESRCH)
        logmsg("executor-agent: killpg(%d, %d): %s\n", (int)r->pid, sig, strerror(errno));
}

static void start_kill(struct run *r, const char *cause)
{
    if (r->finished)
        return;
    if (r->exited) {
        /* The shell is gone: whatever is left of the group dies now. */
        signal_group(r, SIGKILL);
        r->kill_sent = 1;
        return;
    }
    if (r->killing)
        return;
    r->killing = 1;
    r->kill_cause = cause;
    if (r->grace_ms <= 0) {
        signal_group(r, SIGKILL);
        r->kill_sent = 1;
    } else {
        signal_group(r, SIGTERM);
        r->kill_at_ms = now_ms() + r->grace_ms;
    }
}

static struct run *find_fg(struct conn *c, uint32_t id)
{
    for (struct run *r = g_runs; r != NULL; r = r->next)
        if (!r->detached && !r->remove && r->conn == c && r->id == id)
            return r;
    return NULL;
}

static struct run *find_task(const uint8_t *id, uint32_t n)
{
    for (struct run *r = g_runs; r != NULL; r = r->next)
        if (r->detached && strlen(r->task_id) == n && memcmp(r->task_id, id, n) == 0)
            return r;
    return NULL;
}

static int is_credential_name(const char *entry)
{
    const char *eq = strchr(entry, '=');
    size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
    static const char *bad[] = {"KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL"};
    char name[256];
    if (n >= sizeof name)
        return 1; /* absurdly long names are dropped rather than inspected */
    for (size_t i = 0; i < n; i++)
        name[i] = (char)((entry[i] >= 'a' && entry[i] <= 'z') ? entry[i] - 32 : entry[i]);
    name[n] = '\0';
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (strstr(name, bad[i]) != NULL)
            return 1;
    return 0;
}

/* Whether the entry's name is NAME exactly. */
static int name_is(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* Whether the entry's name is in the comma-separated list (the operator's profile env names). */
static int in_list(const char *entry, const char *list)
{
    const char *eq = strchr(entry, '=');
    size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, entry, n) == 0)
            return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* The image's ENV must not choose the code commands run (ENV LD_PRELOAD=..., BASH_ENV=..., PATH=/workspace/bin).
 * Commands get, from the agent's own environ, only: the locale and time zone (LANG, LANGUAGE, LC_*, TZ), the
 * names the operator set in the profile (--pass-env), and PATH reduced to absolute folders outside every place
 * the session can write (workspace, home, /tmp, /var/tmp, /dev/shm, /run, the agent's folders); everything else
 * is dropped. Returns a PATH entry, allocated, or NULL when nothing is left (the default PATH is then used). */
static char *filtered_path(const char *entry)
{
    const char *value = entry + 5;
    size_t cap = strlen(entry) + 1;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    size_t k = (size_t)snprintf(out, cap, "PATH=");
    const char *writable[] = {opt.workspace, opt.home, "/tmp", "/var/tmp", "/dev/shm", "/run", opt.state_dir, "/proc"};
    for (const char *p = value; p != NULL;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int keep = len > 1 && p[0] == '/';
        for (size_t i = 0; keep && i + 2 < len; i++)
            if (p[i] == '/' && p[i + 1] == '.' && (p[i + 2] == '.' || p[i + 2] == '/'))
                keep = 0; /* no '..' or './' tricks: compare plain absolute folders only */
        for (size_t w = 0; keep && w < sizeof writable / sizeof writable[0]; w++) {
            if (writable[w] == NULL)
                continue;
            size_t wl = strlen(writable[w]);
            while (wl > 1 && writable[w][wl - 1] == '/')
                wl--;
            if (len >= wl && strncmp(p, writable[w], wl) == 0 && (len == wl || p[wl] == '/'))
                keep = 0;
        }
        if (keep) {
            if (k > 5)
                out[k++] = ':';
            memcpy(out + k, p, len);
            k += len;
            out[k] = '\0';
        }
        p = end ? end + 1 : NULL;
    }
    if (k == 5) {
        free(out);
        return NULL;
    }
    return out;
}

/* Keeps a private copy of the environment commands start from, then wipes the original block: Linux lets only a
 * ptrace-capable reader see /proc/1/environ, but gVisor (runsc) lets any user read it. An entry that cannot be
 * copied stays where it is (and unwiped) rather than being lost. */
static void init_base_env(char **envp)
{
    size_t n = 0;
    for (char **e = envp; *e != NULL; e++)
        n++;
    g_base_env = calloc(n + 1, sizeof *g_base_env);
    if (g_base_env == NULL)
        return;
    for (char **e = envp; *e != NULL; e++) {
        char *keep = NULL; /* what commands get from this entry (the entry itself, a filtered PATH or nothing) */
        int owned = 0;
        if (strchr(*e, '=') != NULL && !is_credential_name(*e) && strncmp(*e, TAG_VAR "=", sizeof TAG_VAR) != 0) {
            int from_profile = opt.pass_env != NULL && in_list(*e, opt.pass_env);
            if (name_is(*e, "PATH") && !from_profile) {
                keep = filtered_path(*e);
                owned = keep != NULL;
            } else if (from_profile || name_is(*e, "LANG") || name_is(*e, "LANGUAGE") || name_is(*e, "TZ") ||
                       strncmp(*e, "LC_", 3) == 0) {
                keep = *e;
            }
        }
        if (keep != NULL && name_is(keep, "PATH"))
            g_has_path = 1;
        if (keep != NULL && !owned) {
            char *copy = strdup(keep);
            if (copy == NULL) {
                g_base_env[g_base_envc++] = *e; /* cannot copy: keep it in place, unwiped, rather than lose it */
                continue;
            }
            keep = copy;
        }
        if (keep != NULL)
            g_base_env[g_base_envc++] = keep;
        memset(*e, 0, strlen(*e));
    }
}

static size_t name_len(const char *entry)
{
    const char *eq = strchr(entry, '=');
    return eq ? (size_t)(eq - entry) : strlen(entry);
}

/* base env, then the model-friendly defaults and HOME, then the caller's entries, then the run tag;
 * a later entry replaces an earlier one of the same name. */
static char **build_env(char **caller, size_t callerc, const char *tag_entry, char *home_entry)
{
    static char *defaults[] = {"NO_COLOR=1", "TERM=dumb", "PAGER=cat", "GIT_PAGER=cat"};
    size_t ndef = sizeof defaults / sizeof defaults[0];
    size_t total = g_base_envc + 1 + ndef + 1 + callerc + 1;
    char **all = calloc(total + 1, sizeof *all);
    if (all == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < g_base_envc; i++)
        all[k++] = g_base_env[i];
    if (!g_has_path)
        all[k++] = DEFAULT_PATH;
    for (size_t i = 0; i < ndef; i++)
        all[k++] = defaults[i];
    all[k++] = home_entry;
    for (size_t i = 0; i < callerc; i++)
        all[k++] = caller[i];
    all[k++] = (char *)tag_entry;
    /* Keep the last occurrence of each name, preserving order. */
    char **out = calloc(k + 1, sizeof *out);
    if (out == NULL) {
        free(all);
        return NULL;
    }
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        size_t ni = name_len(all[i]);
        int later = 0;
        for (size_t j = i + 1; j < k && !later; j++)
            later = name_len(all[j]) == ni && strncmp(all[i], all[j], ni) == 0;
        if (!later)
            out[m++] = all[i];
    }
    out[m] = NULL;
    free(all);
    return out;
}

static void child_fail(int fd, const char *stage)
{
    char msg[256];
    int e = errno;
    int n = snprintf(msg, sizeof msg, "%s: %s", stage, strerror(e));
    if (n > 0) {
        ssize_t w = write(fd, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
        (void)w;
    }
    _exit(127);
}

/* Fork the command in its own session as opt.uid/opt.gid. Returns 0, or -1 with err filled. */
static int spawn(struct run *r, struct run_req *req, char *err, size_t errlen)
{
    /* "--" ends the shell's options: a command that starts with '-' is a command, not an option of bash. */
    char *sh_argv[5] = {NULL, "-c", "--", req->cmd, NULL};
    char **argv = req->argv;
    if (req->cmd != NULL) {
        if (access("/bin/bash", X_OK) == 0) {
            sh_argv[0] = "/bin/bash";
            r->shell = "bash";
        } else {
            sh_argv[0] = "/bin/sh";
            r->shell = "sh";
        }
        argv = sh_argv;
    } else {
        r->shell = "argv";
    }
    const char *cwd = req->cwd != NULL ? req->cwd : opt.workspace;
    char tag_entry[128];
    snprintf(r->tag, sizeof r->tag, "%d-%llx-%llu", (int)g_self, (unsigned long long)g_boot_ns,
             (unsigned long long)++g_run_counter);
    snprintf(tag_entry, sizeof tag_entry, TAG_VAR "=%s", r->tag);
    char home_entry[PATH_MAX + 8];
    snprintf(home_entry, sizeof home_entry, "HOME=%s", opt.home);
    char **envp = build_env(req->env, req->envc, tag_entry, home_entry);
    if (envp == NULL) {
        snprintf(err, errlen, "out of memory building the environment");
        return -1;
    }
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, inp[2] = {-1, -1}, stp[2] = {-1, -1};
    int want_stdin = req->has_stdin || req->stdin_inline;
    if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0 || (want_stdin && pipe2(inp, O_CLOEXEC) != 0) ||
        pipe2(stp, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto fail;
    }
    r->oom_before = read_oom_kills();
    r->pids_max_before = read_pids_max_events();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s (the container may be at its pids limit)", strerror(errno));
        goto fail;
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        if (setsid() < 0)
            child_fail(stp[1], "setsid");
        /* At the memory limit the OOM killer takes a command before the agent (whose death would lose the session):
         * a process may always raise its own score, and its children inherit it. Best effort (gVisor may lack it). */
        int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (adj >= 0) {
            if (write(adj, "500", 3) != 3) {
                /* left at the agent's own score */
            }
            close(adj);
        }
        int nullfd = -1;
        if (!want_stdin) {
            nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (nullfd < 0)
                child_fail(stp[1], "open /dev/null");
        }
        if (dup2(want_stdin ? inp[0] : nullfd, 0) < 0 || dup2(outp[1], 1) < 0 || dup2(errp[1], 2) < 0)
            child_fail(stp[1], "dup2");
        if (setgroups(0, NULL) != 0)
            child_fail(stp[1], "setgroups");
        if (setgid(opt.gid) != 0)
            child_fail(stp[1], "setgid");
        if (setuid(opt.uid) != 0)
            child_fail(stp[1], "setuid");
        if (chdir(cwd) != 0)
            child_fail(stp[1], "chdir");
        execve(argv[0], argv, envp);
        child_fail(stp[1], "exec");
    }
    r->start_us = now_us();
    close(outp[1]);
    close(errp[1]);
    close(stp[1]);
    if (inp[0] >= 0)
        close(inp[0]);
    outp[1] = errp[1] = stp[1] = inp[0] = -1;
    free(envp);
    envp = NULL;
    /* The status pipe closes on exec (CLOEXEC) or carries the reason the child could not get there. */
    char msg[256];
    ssize_t n;
    do
        n = read(stp[0], msg, sizeof msg - 1);
    while (n < 0 && errno == EINTR);
    close(stp[0]);
    stp[0] = -1;
    if (n > 0) {
        msg[n] = '\0';
        snprintf(err, errlen, "could not start the command: %s", msg);
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        goto fail;
    }
    r->pid = pid;
    r->out_fd = outp[0];
    r->err_fd = errp[0];
    r->in_fd = inp[1];
    if (set_nonblock(r->out_fd) != 0 || set_nonblock(r->err_fd) != 0 || (r->in_fd >= 0 && set_nonblock(r->in_fd) != 0))
        logmsg("executor-agent: fcntl: %s\n", strerror(errno));
    return 0;
fail:
    free(envp);
    int fds[] = {outp[0], outp[1], errp[0], errp[1], inp[0], inp[1], stp[0], stp[1]};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return -1;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* ---------------------------------------------------------------- background output rings */

static int ring_open(struct ring *g)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/ring-XXXXXX", opt.state_dir);
    g->fd = mkostemp(path, O_CLOEXEC);
    if (g->fd < 0)
        return -1;
    /* Unlinked at once: the bytes live in the private tmpfs for as long as the agent keeps the descriptor. */
    if (unlink(path) != 0)
        logmsg("executor-agent: unlink %s: %s\n", path, strerror(errno));
    g->total = 0;
    g->floor = 0;
    return 0;
}

static uint64_t ring_start(const struct ring *g)
{
    uint64_t s = g->total > opt.detached_buffer ? g->total - opt.detached_buffer : 0;
    return s > g->floor ? s : g->floor;
}

/* The private tmpfs is full: give back the bytes of the oldest finished task that still holds some (its record and
 * result stay; a read reports its output as dropped), so a running task's output is kept rather than a finished
 * one's, which its host has most likely read already. 0 when something was freed. */
static int release_finished_ring(void)
{
    struct run *oldest = NULL;
    for (struct run *r = g_runs; r != NULL; r = r->next)
        if (r->detached && r->finished && (r->ring[0].fd >= 0 || r->ring[1].fd >= 0))
            oldest = r;
    if (oldest == NULL)
        return -1;
    for (int i = 0; i < 2; i++) {
        struct ring *g = &oldest->ring[i];
        if (g->fd >= 0) {
            close(g->fd);
            g->fd = -1;
            g->floor = g->total;
        }
    }
    logmsg("executor-agent: task buffers full: dropped the output of finished task %s\n", oldest->task_id);
    return 0;
}

/* All of p at off, or -1 with errno (ENOSPC for a write that stops short). */
static int pwrite_all(int fd, const uint8_t *p, size_t n, off_t off)
{
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = ENOSPC;
            return -1;
        }
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

static void ring_write(struct ring *g, const uint8_t *p, size_t n)
{
    uint64_t cap = opt.detached_buffer;
    if (g->fd < 0) {
        g->total += n;
        g->floor = g->total;
        return;
    }
    if (n > cap) {
        g->total += n - cap;
        p += n - cap;
        n = (size_t)cap;
    }
    uint64_t pos = g->total % cap;
    size_t first = (size_t)(cap - pos) < n ? (size_t)(cap - pos) : n;
    int ok;
    for (;;) {
        ok = pwrite_all(g->fd, p, first, (off_t)pos) == 0 &&
             (n == first || pwrite_all(g->fd, p + first, n - first, 0) == 0);
        if (ok || errno != ENOSPC || release_finished_ring() != 0)
            break;
    }
    g->total += n;
    if (!ok)
        g->floor = g->total; /* what the ring held may be torn: report it as dropped */
}

static size_t ring_read(const struct ring *g, uint64_t off, uint8_t *out, size_t n)
{
    uint64_t cap = opt.detached_buffer;
    size_t got = 0;
    while (got < n) {
        uint64_t pos = (off + got) % cap;
        size_t want = n - got;
        if ((uint64_t)want > cap - pos)
            want = (size_t)(cap - pos);
        ssize_t k = pread(g->fd, out + got, want, (off_t)pos);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    return got;
}

/* ---------------------------------------------------------------- finishing a run */

struct scan_arg {
    struct run *r;
    struct plist *found;
    const struct plist *skip;
    char needle[96];
    size_t nlen;
};

static int scan_visit(const struct pstat *ps, void *arg)
{
    struct scan_arg *a = arg;
    if (pstat_gone(ps))
        return 0;
    if (a->skip != NULL && plist_has(a->skip, ps->pid))
        return 0;
    int match = ps->pgrp == a->r->pid;
    /* Escapees (setsid, double fork) carry the run tag; only the session user's processes can be ours. A run that
     * had the session to itself owns every one started since its shell, tagged or not (`env -i`, `env -u`): nothing
     * else could have started them (processes entered from outside have parent pid 0 and are left alone). */
    if (!match && ps->uid == opt.uid && a->r->alone && a->r->kill_orphans && ps->ppid != 0 &&
        ps->start >= a->r->start_ticks && (a->r->alone_until == 0 || ps->start < a->r->alone_until))
        match = 1;
    if (!match && ps->uid == opt.uid)
        match = environ_has(ps, a->needle, a->nlen);
    if (match)
        plist_add_cmd(a->found, ps->pid, ""); /* a scratch set: the caller reads the command lines it lists */
    return 0;
}

static void scan_leftovers(struct run *r, struct plist *found, const struct plist *skip)
{
    struct scan_arg a = {.r = r, .found = found, .skip = skip};
    a.nlen = (size_t)snprintf(a.needle + 1, sizeof a.needle - 2, TAG_VAR "=%s", r->tag) + 2;
    a.needle[0] = '\0';
    a.needle[a.nlen - 1] = '\0';
    for_each_proc(scan_visit, &a);
}

/* Find what the run left running and, unless it keeps its leftovers, SIGKILL every one found, however many: each scan
 * (skipping those already found) is followed by the kills, and scans repeat until one finds nothing new, so what forked
 * in between is caught too (bounded: a fork bomb outrunning 50 rounds is left to the pids limit and the sweep). All are
 * counted in `left`/`killed`; the first MAX_REPORT of each are listed with their command lines. */
static void kill_leftovers(struct run *r)
{
    for (int round = 0; round < 50; round++) {
        struct plist found = {0};
        scan_leftovers(r, &found, &r->left);
        for (int i = 0; i < found.nall; i++) {
            pid_t pid = found.all[i];
            char cmd[CMDLINE_MAX] = "";
            if (r->left.n < MAX_REPORT || (r->kill_orphans && r->killed.n < MAX_REPORT))
                read_cmdline(pid, cmd, sizeof cmd); /* before the kill: a dead process has no cmdline */
            plist_add_cmd(&r->left, pid, cmd);
            if (r->kill_orphans && kill(pid, SIGKILL) == 0)
                plist_add_cmd(&r->killed, pid, cmd);
        }
        int fresh = found.total;
        plist_free(&found);
        if (!r->kill_orphans || fresh == 0)
            break;
        signal_group(r, SIGKILL);
    }
}

static void fb_result(struct run *r, uint32_t send_max)
{
    fb_str(G_CAUSE, r->cause);
    if (WIFEXITED(r->status))
        fb_int(G_EXIT_CODE, WEXITSTATUS(r->status));
    if (WIFSIGNALED(r->status))
        fb_int(G_SIGNAL, WTERMSIG(r->status));
    fb_int(G_DURATION_US, r->duration_us);
    int64_t cpu = (int64_t)r->ru.ru_utime.tv_sec * 1000000 + r->ru.ru_utime.tv_usec +
                  (int64_t)r->ru.ru_stime.tv_sec * 1000000 + r->ru.ru_stime.tv_usec;
    fb_int(G_CPU_US, cpu);
    fb_int(G_MAXRSS_KB, r->ru.ru_maxrss);
    fb_int(G_BYTES_OUT, (int64_t)r->bytes[0]);
    fb_int(G_BYTES_ERR, (int64_t)r->bytes[1]);
    fb_int(G_DRAIN_CUT, r->drain_cut);
    fb_str(G_SHELL, r->shell);
    fb_str(G_TAG, r->tag);
    fb_int(G_PIDS_MAX_HITS, (int64_t)r->pids_max_hits);
    if (r->cause != NULL && strcmp(r->cause, "oom") == 0)
        fb_int(G_SHMEM_BYTES, (int64_t)read_shmem_bytes());
    fb_int(G_ORPHAN_LEFT_TOTAL, r->left.total);
    fb_int(G_ORPHAN_KILLED_TOTAL, r->killed.total);
    for (int i = 0; i < r->left.n && fb_room(send_max) > 2 * (TLV_HDR + 8 + CMDLINE_MAX) + 512; i++)
        fb_proc(G_ORPHAN_LEFT, r->left.v[i].pid, r->left.v[i].cmd);
    for (int i = 0; i < r->killed.n && fb_room(send_max) > 2 * (TLV_HDR + 8 + CMDLINE_MAX) + 512; i++)
        fb_proc(G_ORPHAN_KILLED, r->killed.v[i].pid, r->killed.v[i].cmd);
}

static void send_result(struct conn *c, uint32_t id, struct run *r)
{
    if (c == NULL || c->dead)
        return;
    fb_begin(T_RESULT, id);
    fb_result(r, c->send_max);
    conn_send(c);
}

static void drain_now(struct run *r, int *fd, int which);
static void quiet_sweep(struct run *r);

static void finish_run(struct run *r)
{
    int cut = 0;
    if (r->out_fd >= 0 || r->err_fd >= 0) {
        drain_now(r, &r->out_fd, 0);
        drain_now(r, &r->err_fd, 1);
        cut = r->out_fd >= 0 || r->err_fd >= 0;
        close_fd(&r->out_fd);
        close_fd(&r->err_fd);
    }
    close_fd(&r->in_fd);
    r->drain_cut = cut;
    r->duration_us = now_us() - r->start_us;
    kill_leftovers(r);
    if (!r->kill_orphans && r->left.total > 0) {
        /* they may start processes at any time from now on, until they are gone (kept_refresh) */
        if (!g_kept_leftovers || r->start_ticks < g_kept_since)
            g_kept_since = r->start_ticks;
        g_kept_leftovers = 1;
    }
    quiet_sweep(r);
    uint64_t oom_delta = read_oom_kills() - r->oom_before;
    r->pids_max_hits = read_pids_max_events() - r->pids_max_before;
    int sig = WIFSIGNALED(r->status) ? WTERMSIG(r->status) : 0;
    int code = WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1;
    if (r->killing)
        r->cause = r->kill_cause;
    else if (oom_delta > 0 && (sig == SIGKILL || code == 137))
        /* A SIGKILL we did not send, with the memory cgroup's oom_kill counter moved during the run. */
        r->cause = "oom";
    else if (sig != 0)
        r->cause = "signaled";
    else
        r->cause = "exited";
    r->finished = 1;
    free(r->in_buf.p);
    memset(&r->in_buf, 0, sizeof r->in_buf);
    if (!r->detached) {
        send_result(r->conn, r->id, r);
        r->remove = 1;
        return;
    }
    for (int i = 0; i < STOP_WAITERS; i++) {
        if (r->waiters[i].conn != NULL)
            send_result(r->waiters[i].conn, r->waiters[i].id, r);
        r->waiters[i].conn = NULL;
    }
}

/* Read what a pipe holds right now (bounded), ignoring backpressure: used at the drain deadline so bytes
 * written before the shell exited are not lost to a short drain bound. */
static void deliver(struct run *r, int which, const uint8_t *p, size_t n)
{
    r->bytes[which] += n;
    if (r->detached) {
        ring_write(&r->ring[which], p, n);
        return;
    }
    struct conn *c = r->conn;
    if (c == NULL || c->dead)
        return;
    size_t chunk_max = c->send_max - FRAME_MIN_LEN;
    while (n > 0) {
        size_t k = n < chunk_max ? n : chunk_max;
        fb_begin(which == 0 ? T_OUT : T_ERR, r->id);
        if (buf_add(&g_fb, p, k) != 0)
            g_fb_bad = 1;
        conn_send(c);
        p += k;
        n -= k;
    }
}

static void drain_now(struct run *r, int *fd, int which)
{
    static uint8_t tmp[READ_CHUNK];
    size_t total = 0;
    while (*fd >= 0 && total < DRAIN_FINAL_MAX) {
        ssize_t n = read(*fd, tmp, sizeof tmp);
        if (n > 0) {
            deliver(r, which, tmp, (size_t)n);
            total += (size_t)n;
        } else if (n == 0) {
            close_fd(fd);
        } else if (errno == EINTR) {
            continue;
        } else {
            if (errno != EAGAIN)
                close_fd(fd);
            break;
        }
    }
}

/* One read from a run's pipe. Foreground output goes straight into the connection's queue (no extra copy). */
static void pipe_readable(struct run *r, int which)
{
    int *fd = which == 0 ? &r->out_fd : &r->err_fd;
    struct conn *c = r->conn;
    if (!r->detached && c != NULL && !c->dead) {
        size_t chunk = c->send_max - FRAME_MIN_LEN;
        if (chunk > READ_CHUNK)
            chunk = READ_CHUNK;
        if (buf_reserve(&c->out, FRAME_HDR + chunk) != 0) {
            conn_kill(c);
            return;
        }
        uint8_t *h = c->out.p + c->out.len;
        ssize_t n = read(*fd, h + FRAME_HDR, chunk);
        if (n > 0) {
            put_u32(h, (uint32_t)(n + FRAME_MIN_LEN));
            h[4] = which == 0 ? T_OUT : T_ERR;
            put_u32(h + 5, r->id);
            c->out.len += FRAME_HDR + (size_t)n;
            r->bytes[which] += (size_t)n;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            close_fd(fd);
        }
        return;
    }
    static uint8_t tmp[READ_CHUNK];
    ssize_t n = read(*fd, tmp, sizeof tmp);
    if (n > 0)
        deliver(r, which, tmp, (size_t)n);
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        close_fd(fd);
}

static void stdin_writable(struct run *r)
{
    while (r->in_fd >= 0 && r->in_off < r->in_buf.len) {
        ssize_t n = write(r->in_fd, r->in_buf.p + r->in_off, r->in_buf.len - r->in_off);
        if (n > 0) {
            r->in_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            if (n < 0 && errno != EAGAIN)
                close_fd(&r->in_fd); /* EPIPE: the command stopped reading; the rest is dropped */
            break;
        }
    }
    if (r->in_off == r->in_buf.len) {
        r->in_buf.len = 0;
        r->in_off = 0;
        if (r->in_eof)
            close_fd(&r->in_fd);
    }
}

static void free_run(struct run *r)
{
    close_fd(&r->out_fd);
    close_fd(&r->err_fd);
    close_fd(&r->in_fd);
    close_fd(&r->ring[0].fd);
    close_fd(&r->ring[1].fd);
    free(r->in_buf.p);
    plist_free(&r->left);
    plist_free(&r->killed);
    free(r);
}

static struct run *new_run(void)
{
    struct run *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->out_fd = r->err_fd = r->in_fd = -1;
    r->ring[0].fd = r->ring[1].fd = -1;
    return r;
}

/* ---------------------------------------------------------------- reaping */

static void reap(void)
{
    for (;;) {
        int st = 0;
        struct rusage ru;
        pid_t pid = wait4(-1, &st, WNOHANG, &ru);
        if (pid <= 0) {
            if (pid < 0 && errno == EINTR)
                continue;
            return;
        }
        for (struct run *r = g_runs; r != NULL; r = r->next) {
            if (r->pid != pid || r->exited)
                continue;
            r->exited = 1;
            r->status = st;
            r->ru = ru;
            r->drain_end_ms = now_ms() + r->drain_ms;
            close_fd(&r->in_fd);
            if (r->killing) {
                /* Escalate at once: the shell is gone, nobody needs the rest of the grace period. */
                signal_group(r, SIGKILL);
                r->kill_sent = 1;
            }
            break;
        }
    }
}

/* ---------------------------------------------------------------- sweep */

struct sweep_arg {
    struct pstat *v;
    size_t n, cap;
};

static int sweep_collect(const struct pstat *ps, void *arg)
{
    struct sweep_arg *a = arg;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 256;
        if (nc > (1u << 22))
            return 1;
        struct pstat *nv = realloc(a->v, nc * sizeof *nv);
        if (nv == NULL)
            return 1;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = *ps;
    return 0;
}

/* Kill every descendant of the agent (as init: every process the session started, including `env -i`
 * daemons that reparented to us). Processes entered from outside the container (ppid 0, e.g. an exec bridge)
 * are not ours to kill. Returns the killed processes. Needs no new process: works at the pids limit. */
static void kill_descendants(struct plist *killed, int session_user_only, unsigned long long since);

static void sweep(struct plist *killed)
{
    for (struct run *r = g_runs; r != NULL; r = r->next) {
        if (!r->finished && !r->killing && !r->exited) {
            r->killing = 1;
            r->kill_cause = "cancelled";
        }
        r->kill_sent = 1;
    }
    kill_descendants(killed, 0, 0);
    g_shared = g_shared_unsure = 0;
}

/* The session went quiet (`r` ends and no other run or task is live) after runs or tasks overlapped: a process of
 * the session user that the agent's descendants still hold, that started since the first of them and whose ancestors
 * (below the agent) did too, is a leftover of one of them that could not be told apart (an `env -i` daemon) while
 * another was live; a new child of an older process (a kept daemon's worker) is that process's. It is killed now, not at the
 * session's end, and listed on `r`. Not when one of them keeps its leftovers (a background task, orphans = "keep":
 * its untagged daemons are meant to live) or a run or task that keeps its leftovers left some before. */
static void quiet_sweep(struct run *r)
{
    if (!g_shared)
        return;
    for (struct run *o = g_runs; o != NULL; o = o->next)
        if (o != r && !o->finished)
            return;
    int unsure = g_shared_unsure || g_kept_leftovers;
    unsigned long long since = g_shared_since;
    g_shared = g_shared_unsure = 0;
    if (unsure)
        return;
    struct plist killed = {0};
    kill_descendants(&killed, 1, since);
    for (int i = 0; i < killed.n; i++) {
        if (!plist_has(&r->left, killed.v[i].pid))
            plist_add_cmd(&r->left, killed.v[i].pid, killed.v[i].cmd);
        if (!plist_has(&r->killed, killed.v[i].pid))
            plist_add_cmd(&r->killed, killed.v[i].pid, killed.v[i].cmd);
    }
    plist_free(&killed);
}

/* Kill (SIGKILL) every descendant of the agent; with `session_user_only`, only the session user's processes started at
 * or after `since` (clock ticks). Rescans until a pass finds nothing new (bounded). */
static void kill_descendants(struct plist *killed, int session_user_only, unsigned long long since)
{
    for (int round = 0; round < 50; round++) {
        struct sweep_arg a = {0};
        for_each_proc(sweep_collect, &a);
        char *mark = calloc(a.n ? a.n : 1, 1);
        if (mark == NULL) {
            free(a.v);
            return;
        }
        /* Fixpoint over the parent links: depth-many passes at most. 1: a descendant; 2: a descendant of a process
         * (below the agent) started before `since`, such as a kept daemon's new worker: that process's, not ours. */
        int changed = 1;
        while (changed) {
            changed = 0;
            for (size_t i = 0; i < a.n; i++) {
                if (mark[i])
                    continue;
                if (a.v[i].ppid == g_self) {
                    mark[i] = 1;
                    changed = 1;
                    continue;
                }
                for (size_t j = 0; j < a.n; j++) {
                    if (mark[j] && a.v[j].pid == a.v[i].ppid) {
                        mark[i] = (char)(mark[j] == 2 || (session_user_only && a.v[j].start < since) ? 2 : 1);
                        changed = 1;
                        break;
                    }
                }
            }
        }
        int fresh = 0;
        for (size_t i = 0; i < a.n; i++) {
            if (!mark[i] || pstat_gone(&a.v[i]) ||
                (session_user_only && (mark[i] == 2 || a.v[i].uid != opt.uid || a.v[i].start < since)))
                continue;
            if (plist_has(killed, a.v[i].pid)) {
                if (kill(a.v[i].pid, SIGKILL) != 0 && errno != ESRCH)
                    logmsg("executor-agent: kill %d: %s\n", (int)a.v[i].pid, strerror(errno));
                continue;
            }
            char cmd[CMDLINE_MAX];
            read_cmdline(a.v[i].pid, cmd, sizeof cmd); /* before the kill: a dead process has no cmdline */
            if (kill(a.v[i].pid, SIGKILL) == 0) {
                plist_add_cmd(killed, a.v[i].pid, cmd);
                fresh++;
            }
        }
        free(mark);
        free(a.v);
        if (fresh == 0)
            break;
    }
}

static int kept_visit(const struct pstat *ps, void *arg)
{
    if (pstat_gone(ps) || ps->uid != opt.uid || ps->ppid == 0 || ps->start < g_kept_since)
        return 0;
    *(int *)arg = 1;
    return 1;
}

/* Kept leftovers end when they are gone. Everything they can have started, tagged or not, directly or through a child
 * that has since died, is a process of the session user started since the first run or task that kept some: when no
 * such process is left (a STOP killed them, they exited), nothing can start processes on their behalf any more and
 * runs have the session alone again. Any other such process (a live run's, a daemon a quiet sweep could not attribute)
 * keeps the state, which only errs towards killing less. */
static void kept_refresh(void)
{
    if (!g_kept_leftovers)
        return;
    int found = 0;
    if (for_each_proc(kept_visit, &found) == 0 && !found)
        g_kept_leftovers = 0;
}

/* ---------------------------------------------------------------- requests */

static void handle_run(struct conn *c, const struct frame_view *f, int detached)
{
    struct run_req req;
    char err[512];
    if (run_req_parse(f->payload, f->len, &req, err, sizeof err) != 0) {
        send_error(c, f->id, "bad_request", err);
        return;
    }
    if (!detached && (f->id == 0 || find_fg(c, f->id) != NULL)) {
        send_error(c, f->id, "bad_request", "run id 0 or already in use on this connection");
        run_req_free(&req);
        return;
    }
    if (detached && g_ntasks >= MAX_TASKS) {
        /* Make room by forgetting the oldest finished task. */
        struct run *oldest = NULL, **link = NULL;
        for (struct run **pp = &g_runs; *pp != NULL; pp = &(*pp)->next)
            if ((*pp)->detached && (*pp)->finished)
                oldest = *pp, link = pp;
        if (oldest == NULL) {
            send_error(c, f->id, "busy", "too many background tasks are running; stop some first");
            run_req_free(&req);
            return;
        }
        *link = oldest->next;
        free_run(oldest);
        g_ntasks--;
    }
    struct run *r = new_run();
    if (r == NULL) {
        send_error(c, f->id, "busy", "out of memory");
        run_req_free(&req);
        return;
    }
    r->detached = detached;
    r->conn = detached ? NULL : c;
    r->id = f->id;
    r->grace_ms = req.grace_ms;
    r->drain_ms = req.drain_ms;
    r->kill_orphans = req.kill_orphans;
    snprintf(r->desc, sizeof r->desc, "%s", req.cmd != NULL ? req.cmd : req.argv[0]);
    if (detached && (ring_open(&r->ring[0]) != 0 || ring_open(&r->ring[1]) != 0)) {
        snprintf(err, sizeof err, "cannot create the task buffer in %s: %s", opt.state_dir, strerror(errno));
        send_error(c, f->id, "spawn_failed", err);
        free_run(r);
        run_req_free(&req);
        return;
    }
    int live = 0;
    for (struct run *o = g_runs; o != NULL && !live; o = o->next)
        live = !o->finished;
    if (!live)
        kept_refresh(); /* before the spawn: the new shell is such a process itself */
    if (spawn(r, &req, err, sizeof err) != 0) {
        send_error(c, f->id, "spawn_failed", err);
        free_run(r);
        run_req_free(&req);
        return;
    }
    if (!detached && req.timeout_ms > 0)
        r->deadline_ms = r->start_us / 1000 + req.timeout_ms;
    if (req.stdin_inline) {
        if (buf_add(&r->in_buf, req.stdin_data, req.stdin_len) != 0)
            logmsg("executor-agent: out of memory for stdin\n");
        r->in_eof = 1;
    }
    if (detached) {
        snprintf(r->task_id, sizeof r->task_id, "t%llu", (unsigned long long)++g_task_counter);
        g_ntasks++;
    }
    /* Whether this run has the session to itself: then every process of the session user started since its shell is
     * its own, tagged or not (an `env -i` daemon), and is a leftover when it ends. */
    struct pstat shell;
    r->start_ticks = read_pstat(r->pid, &shell) == 0 ? shell.start : 0;
    r->alone = r->start_ticks != 0 && !g_kept_leftovers;
    for (struct run *o = g_runs; o != NULL; o = o->next) {
        if (o->finished) {
            /* An ended task kept for its output had the session alone: nothing started from now on is its own, so
             * a STOP of it later (which kills its leftovers) never takes this run's processes, nor a later task's. */
            if (r->start_ticks == 0)
                o->alone = 0;
            else if (o->alone_until == 0 || r->start_ticks < o->alone_until)
                o->alone_until = r->start_ticks;
            continue;
        }
        r->alone = 0;
        share(o);
        share(r);
        if ((o->killing || o->exited) && !o->detached && r->start_ticks != 0) {
            /* It starts nothing of its own any more (its shell is being killed or is gone): it still owns what was
             * started between its shell and this run, so a Ctrl-C followed at once by the next command does not
             * free an untagged daemon of the interrupted one. */
            if (o->alone_until == 0 || r->start_ticks < o->alone_until)
                o->alone_until = r->start_ticks;
        } else {
            o->alone = 0;
        }
    }
    r->next = g_runs;
    g_runs = r;
    if (detached) {
        fb_begin(T_TASK, f->id);
        fb_str(G_TASK, r->task_id);
        fb_int(G_PID, r->pid);
        fb_str(G_SHELL, r->shell);
        fb_str(G_TAG, r->tag);
    } else {
        fb_begin(T_STARTED, f->id);
        fb_int(G_PID, r->pid);
        fb_str(G_SHELL, r->shell);
        fb_str(G_TAG, r->tag);
    }
    conn_send(c);
    run_req_free(&req);
}

/* Fields of READ / STOP requests. */
struct small_req {
    const uint8_t *task;
    uint32_t task_len;
    int64_t stream, offset, max;
};

static int parse_small(const struct frame_view *f, struct small_req *q)
{
    memset(q, 0, sizeof *q);
    q->stream = 1;
    q->max = INT64_MAX;
    struct tlv_iter it = {f->payload, f->len};
    uint8_t tag;
    const uint8_t *val;
    uint32_t vlen;
    int rc;
    while ((rc = tlv_next(&it, &tag, &val, &vlen)) == 1) {
        switch (tag) {
        case G_TASK:
            q->task = val;
            q->task_len = vlen;
            break;
        case G_STREAM:
            if (tlv_int(val, vlen, &q->stream) != 0 || (q->stream != 1 && q->stream != 2))
                return -1;
            break;
        case G_OFFSET:
            if (tlv_int(val, vlen, &q->offset) != 0 || q->offset < 0)
                return -1;
            break;
        case G_MAX:
            if (tlv_int(val, vlen, &q->max) != 0 || q->max < 0)
                return -1;
            break;
        default:
            return -1;
        }
    }
    return rc < 0 || q->task == NULL ? -1 : 0;
}

static void handle_read(struct conn *c, const struct frame_view *f)
{
    struct small_req q;
    if (parse_small(f, &q) != 0) {
        send_error(c, f->id, "bad_request", "READ needs task, and stream 1|2, offset >= 0, max >= 0");
        return;
    }
    struct run *r = find_task(q.task, q.task_len);
    if (r == NULL) {
        send_error(c, f->id, "no_task", "no such background task");
        return;
    }
    int w = (int)q.stream - 1;
    struct ring *g = &r->ring[w];
    uint64_t start = ring_start(g);
    uint64_t off = (uint64_t)q.offset;
    if (off < start)
        off = start;
    if (off > g->total)
        off = g->total;
    fb_begin(T_CHUNK, f->id);
    fb_str(G_TASK, r->task_id);
    fb_int(G_STREAM, q.stream);
    fb_int(G_START, (int64_t)start);
    fb_int(G_END, (int64_t)g->total);
    fb_int(G_RUNNING, !r->finished);
    fb_int(G_PID, r->pid);
    if (r->finished)
        fb_result(r, c->send_max / 2);
    /* The data goes last so it can take whatever room the frame has left. */
    size_t room = fb_room(c->send_max);
    size_t n = room > 64 ? room - 64 : 0;
    if ((uint64_t)n > g->total - off)
        n = (size_t)(g->total - off);
    if ((uint64_t)n > (uint64_t)q.max)
        n = (size_t)q.max;
    fb_int(G_OFFSET, (int64_t)off);
    uint8_t h[TLV_HDR];
    h[0] = G_DATA;
    if (buf_reserve(&g_fb, TLV_HDR + n) != 0) {
        conn_kill(c);
        return;
    }
    size_t at = g_fb.len;
    size_t got = ring_read(g, off, g_fb.p + at + TLV_HDR, n);
    put_u32(h + 1, (uint32_t)got);
    memcpy(g_fb.p + at, h, TLV_HDR);
    g_fb.len += TLV_HDR + got;
    conn_send(c);
}

static void handle_stop(struct conn *c, const struct frame_view *f)
{
    struct small_req q;
    if (parse_small(f, &q) != 0) {
        send_error(c, f->id, "bad_request", "STOP needs a task");
        return;
    }
    struct run *r = find_task(q.task, q.task_len);
    if (r == NULL) {
        send_error(c, f->id, "no_task", "no such background task");
        return;
    }
    /* Stopping a task stops all of it: what it left running (its process group, escapees carrying its tag) goes
     * too, whether it is still running or its shell has ended (a task keeps its leftovers until then). */
    r->kill_orphans = 1;
    if (r->finished) {
        plist_free(&r->left);
        kill_leftovers(r);
        send_result(c, f->id, r);
        return;
    }
    int placed = 0;
    for (int i = 0; i < STOP_WAITERS && !placed; i++) {
        if (r->waiters[i].conn == NULL) {
            r->waiters[i].conn = c;
            r->waiters[i].id = f->id;
            placed = 1;
        }
    }
    if (!placed)
        send_error(c, f->id, "busy", "too many STOP requests are waiting for this task");
    start_kill(r, "cancelled");
}

static void handle_list(struct conn *c, const struct frame_view *f)
{
    static struct buf nb;
    fb_begin(T_TASKS, f->id);
    for (struct run *r = g_runs; r != NULL; r = r->next) {
        if (!r->detached)
            continue;
        /* Build the record on its own, then copy it in if it fits. */
        struct buf saved = g_fb;
        int saved_bad = g_fb_bad;
        g_fb = nb;
        g_fb.len = 0;
        fb_str(G_TASK, r->task_id);
        fb_int(G_PID, r->pid);
        fb_int(G_RUNNING, !r->finished);
        fb_str(G_CMD, r->desc);
        fb_int(G_BYTES_OUT, (int64_t)r->bytes[0]);
        fb_int(G_BYTES_ERR, (int64_t)r->bytes[1]);
        if (r->finished) {
            fb_str(G_CAUSE, r->cause);
            if (WIFEXITED(r->status))
                fb_int(G_EXIT_CODE, WEXITSTATUS(r->status));
            if (WIFSIGNALED(r->status))
                fb_int(G_SIGNAL, WTERMSIG(r->status));
        }
        nb = g_fb;
        int rec_bad = g_fb_bad;
        g_fb = saved;
        g_fb_bad = saved_bad || rec_bad;
        if (fb_room(c->send_max) < nb.len + TLV_HDR + 16)
            break;
        fb_tlv(G_TASK_REC, nb.p, nb.len);
    }
    conn_send(c);
}

static void handle_sweep(struct conn *c, const struct frame_view *f)
{
    struct plist killed = {0};
    sweep(&killed);
    g_kept_leftovers = 0; /* nothing of the session is left */
    fb_begin(T_PROCS, f->id);
    fb_int(G_MAX, killed.total);
    for (int i = 0; i < killed.n && fb_room(c->send_max) > TLV_HDR + 8 + CMDLINE_MAX + 64; i++)
        fb_proc(G_PROC, killed.v[i].pid, killed.v[i].cmd);
    plist_free(&killed);
    conn_send(c);
}

static void handle_info(struct conn *c, const struct frame_view *f)
{
    fb_begin(T_INFO_OK, f->id);
    fb_str(G_AGENT_VERSION, AGENT_VERSION);
    fb_int(G_VERSION, PROTO_VERSION);
    fb_int(G_HAS_BASH, access("/bin/bash", X_OK) == 0);
    fb_int(G_UID, opt.uid);
    fb_int(G_GID, opt.gid);
    fb_int(G_PID, g_self);
    fb_int(G_IS_INIT, g_self == 1);
    fb_int(G_MAX_FRAME, opt.max_frame);
    conn_send(c);
}

static void handle_hello(struct conn *c, const struct frame_view *f)
{
    int64_t version = -1, host_max = -1;
    struct tlv_iter it = {f->payload, f->len};
    uint8_t tag;
    const uint8_t *val;
    uint32_t vlen;
    int rc;
    while ((rc = tlv_next(&it, &tag, &val, &vlen)) == 1) {
        if (tag == G_VERSION && tlv_int(val, vlen, &version) != 0)
            rc = -1;
        else if (tag == G_MAX_FRAME && tlv_int(val, vlen, &host_max) != 0)
            rc = -1;
        if (rc < 0)
            break;
    }
    c->send_max = FRAME_MIN_MAX; /* until agreed, replies stay small */
    char msg[160];
    if (rc < 0 || version < 0 || host_max < FRAME_MIN_MAX) {
        send_error(c, f->id, "bad_request", "HELLO needs version and max_frame >= 4096");
        c->closing = 1;
        return;
    }
    if (version != PROTO_VERSION) {
        snprintf(msg, sizeof msg, "protocol version mismatch: agent speaks %d, host sent %lld; rebuild the agent",
                 PROTO_VERSION, (long long)version);
        fb_begin(T_ERROR, f->id);
        fb_str(G_CODE, "version");
        fb_str(G_MSG, msg);
        fb_int(G_VERSION, PROTO_VERSION);
        conn_send(c);
        c->closing = 1;
        return;
    }
    c->hello = 1;
    c->send_max = (uint64_t)host_max < opt.max_frame ? (uint32_t)host_max : opt.max_frame;
    fb_begin(T_HELLO_OK, f->id);
    fb_int(G_VERSION, PROTO_VERSION);
    fb_int(G_MAX_FRAME, opt.max_frame);
    fb_str(G_AGENT_VERSION, AGENT_VERSION);
    fb_int(G_PID, g_self);
    conn_send(c);
}

/* Returns -1 when the connection must be closed (protocol violation). */
static int handle_frame(struct conn *c, const struct frame_view *f)
{
    if (!frame_type_known(f->type))
        return -1;
    if (!c->hello) {
        if (f->type != T_HELLO)
            return -1;
        handle_hello(c, f);
        return 0;
    }
    struct run *r;
    switch (f->type) {
    case T_HELLO:
        return -1;
    case T_RUN:
        handle_run(c, f, 0);
        break;
    case T_START:
        handle_run(c, f, 1);
        break;
    case T_STDIN:
        r = find_fg(c, f->id);
        if (r == NULL || r->in_fd < 0)
            break; /* the run ended or closed its stdin: late bytes are dropped */
        if (f->len == 0) {
            r->in_eof = 1;
        } else if (r->in_buf.len - r->in_off + f->len > STDIN_PENDING_MAX) {
            send_error(c, f->id, "bad_request", "stdin arrives faster than the command reads it; over 64 MiB queued");
            start_kill(r, "cancelled");
            break;
        } else if (buf_add(&r->in_buf, f->payload, f->len) != 0) {
            start_kill(r, "cancelled");
            break;
        }
        stdin_writable(r);
        break;
    case T_CANCEL:
        r = find_fg(c, f->id);
        if (r != NULL)
            start_kill(r, "cancelled");
        break;
    case T_READ:
        handle_read(c, f);
        break;
    case T_STOP:
        handle_stop(c, f);
        break;
    case T_LIST:
        handle_list(c, f);
        break;
    case T_SWEEP:
        handle_sweep(c, f);
        break;
    case T_INFO:
        handle_info(c, f);
        break;
    case T_PING: {
        fb_begin(T_PONG, f->id);
        size_t n = f->len < c->send_max - FRAME_MIN_LEN ? f->len : c->send_max - FRAME_MIN_LEN;
        if (buf_add(&g_fb, f->payload, n) != 0)
            g_fb_bad = 1;
        conn_send(c);
        break;
    }
    default:
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- connection IO */

static void conn_kill(struct conn *c)
{
    if (c->dead)
        return;
    c->dead = 1;
    close_fd(&c->fd);
    for (struct run *r = g_runs; r != NULL; r = r->next) {
        if (!r->detached && r->conn == c) {
            /* A lost host never leaves a foreground run unbounded. */
            r->conn = NULL;
            start_kill(r, "cancelled");
        }
        for (int i = 0; i < STOP_WAITERS; i++)
            if (r->waiters[i].conn == c)
                r->waiters[i].conn = NULL;
    }
}

static void conn_readable(struct conn *c)
{
    size_t want = (size_t)opt.max_frame + FRAME_LEN_BYTES;
    if (c->in_len == c->in_cap && c->in_cap < want) {
        size_t nc = c->in_cap ? c->in_cap * 2 : 65536;
        if (nc > want)
            nc = want;
        uint8_t *np = realloc(c->in, nc);
        if (np == NULL) {
            conn_kill(c);
            return;
        }
        c->in = np;
        c->in_cap = nc;
    }
    ssize_t n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
    if (n == 0) {
        conn_kill(c);
        return;
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_kill(c);
        return;
    }
    c->in_len += (size_t)n;
    size_t pos = 0;
    while (!c->dead && !c->closing) {
        struct frame_view f;
        size_t used = 0;
        int rc = frame_parse(c->in + pos, c->in_len - pos, opt.max_frame, &f, &used);
        if (rc < 0) {
            conn_kill(c);
            return;
        }
        if (rc == 0)
            break;
        if (handle_frame(c, &f) != 0) {
            conn_kill(c);
            return;
        }
        pos += used;
    }
    if (c->dead)
        return;
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
}

static void conn_flush(struct conn *c)
{
    while (!c->dead && conn_pending(c) > 0) {
        ssize_t n = send(c->fd, c->out.p + c->out_off, conn_pending(c), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            conn_kill(c);
        break;
    }
    if (c->dead)
        return;
    if (c->out_off == c->out.len) {
        c->out.len = 0;
        c->out_off = 0;
        if (c->closing)
            conn_kill(c);
    } else if (c->out_off > (1u << 20)) {
        memmove(c->out.p, c->out.p + c->out_off, conn_pending(c));
        c->out.len -= c->out_off;
        c->out_off = 0;
    }
}

static void accept_conns(void)
{
    for (;;) {
        int fd = accept4(g_listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                logmsg("executor-agent: accept: %s\n", strerror(errno));
            return;
        }
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
            close(fd);
            continue;
        }
        /* Commands run as an unprivileged uid inside our pid namespace; the host appears as pid 0 (outside the
         * namespace) and an exec bridge as root. Anyone else is a command trying to talk to its supervisor. */
        if (!(cred.pid == 0 || cred.uid == 0 || cred.uid == geteuid())) {
            logmsg("executor-agent: refused a connection from pid %d uid %d\n", (int)cred.pid, (int)cred.uid);
            close(fd);
            continue;
        }
        if (g_nconns >= MAX_CONNS) {
            logmsg("executor-agent: refused a connection: %d already open\n", MAX_CONNS);
            close(fd);
            continue;
        }
        struct conn *c = calloc(1, sizeof *c);
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->send_max = FRAME_MIN_MAX;
        c->next = g_conns;
        g_conns = c;
        g_nconns++;
    }
}

/* ---------------------------------------------------------------- init */

static void usage_init(void)
{
    logmsg("usage: agent init --listen SOCK --uid U --gid G --workspace DIR --home DIR --state-dir DIR "
           "[--max-frame N] [--detached-buffer N] [--orphan-exit-ms N] [--pass-env NAME,NAME...]\n");
}

static int parse_init(int argc, char **argv)
{
    uint64_t v;
    int have_uid = 0, have_gid = 0;
    opt.max_frame = 1u << 20;
    opt.detached_buffer = 8u << 20;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (val == NULL) {
            usage_init();
            return -1;
        }
        i++;
        if (strcmp(a, "--listen") == 0)
            opt.listen = val;
        else if (strcmp(a, "--workspace") == 0)
            opt.workspace = val;
        else if (strcmp(a, "--home") == 0)
            opt.home = val;
        else if (strcmp(a, "--state-dir") == 0)
            opt.state_dir = val;
        else if (strcmp(a, "--uid") == 0 && parse_u64(val, 1, 0x7fffffff, &v) == 0)
            opt.uid = (uid_t)v, have_uid = 1;
        else if (strcmp(a, "--gid") == 0 && parse_u64(val, 1, 0x7fffffff, &v) == 0)
            opt.gid = (gid_t)v, have_gid = 1;
        else if (strcmp(a, "--max-frame") == 0 && parse_u64(val, FRAME_MIN_MAX, FRAME_MAX_MAX, &v) == 0)
            opt.max_frame = (uint32_t)v;
        else if (strcmp(a, "--detached-buffer") == 0 && parse_u64(val, 4096, 1ull << 40, &v) == 0)
            opt.detached_buffer = v;
        else if (strcmp(a, "--orphan-exit-ms") == 0 && parse_u64(val, 0, 1ull << 40, &v) == 0)
            opt.orphan_exit_ms = v;
        else if (strcmp(a, "--pass-env") == 0)
            opt.pass_env = val;
        else {
            logmsg("executor-agent: bad option or value: %s %s\n", a, val);
            usage_init();
            return -1;
        }
    }
    if (opt.listen == NULL || opt.workspace == NULL || opt.home == NULL || opt.state_dir == NULL || !have_uid ||
        !have_gid) {
        usage_init();
        return -1;
    }
    return 0;
}

static void prepare_dirs(void)
{
    struct stat st;
    if (mkdir(opt.state_dir, 0700) != 0 && errno != EEXIST)
        logmsg("executor-agent: mkdir %s: %s\n", opt.state_dir, strerror(errno));
    if (chmod(opt.state_dir, 0700) != 0)
        logmsg("executor-agent: chmod %s: %s\n", opt.state_dir, strerror(errno));
    const char *dirs[] = {opt.workspace, opt.home};
    for (size_t i = 0; i < 2; i++) {
        if (stat(dirs[i], &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 && getuid() == 0) {
            /* A fresh volume or tmpfs is root's; hand it to the session user (top directory only). */
            if (chown(dirs[i], opt.uid, opt.gid) != 0)
                logmsg("executor-agent: chown %s: %s\n", dirs[i], strerror(errno));
        }
    }
}

static int open_listener(void)
{
    /* Bound under a temporary name and renamed once listening: whoever waits for the path to appear can
     * connect at once. */
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    char tmp[sizeof sa.sun_path];
    if (strlen(opt.listen) + 4 >= sizeof sa.sun_path) {
        logmsg("executor-agent: socket path too long (max %zu bytes): %s\n", sizeof sa.sun_path - 5, opt.listen);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s.new", opt.listen);
    strcpy(sa.sun_path, tmp);
    struct stat st;
    if (lstat(tmp, &st) == 0 && S_ISSOCK(st.st_mode) && unlink(tmp) != 0)
        logmsg("executor-agent: unlink stale %s: %s\n", tmp, strerror(errno));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        logmsg("executor-agent: socket: %s\n", strerror(errno));
        return -1;
    }
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (rc != 0) {
        logmsg("executor-agent: bind %s: %s\n", tmp, strerror(errno));
        close(fd);
        return -1;
    }
    /* The socket is 0600; hand it to the owner of its folder (the host user) so the host can connect. */
    char dir[sizeof sa.sun_path];
    strcpy(dir, opt.listen);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash != NULL)
        *slash = '\0';
    else
        strcpy(dir, ".");
    if (stat(dir, &st) == 0 && st.st_uid != geteuid() && chown(tmp, st.st_uid, st.st_gid) != 0)
        logmsg("executor-agent: chown %s to %d: %s\n", tmp, (int)st.st_uid, strerror(errno));
    if (listen(fd, 128) != 0 || rename(tmp, opt.listen) != 0) {
        logmsg("executor-agent: listen on %s: %s\n", opt.listen, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Keep only KILL (signal the session user's processes), SETUID and SETGID (drop to the session user; switch
 * filesystem ids to read a process's environ). CHOWN and DAC_OVERRIDE were needed only for the start. */
static int drop_caps(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) != 0) {
        logmsg("executor-agent: capget: %s\n", strerror(errno));
        return -1;
    }
    uint32_t keep = (1u << CAP_KILL) | (1u << CAP_SETUID) | (1u << CAP_SETGID);
    d[0].effective &= keep;
    d[0].permitted &= keep;
    d[0].inheritable = 0;
    d[1].effective = d[1].permitted = d[1].inheritable = 0;
    if (syscall(SYS_capset, &h, d) != 0) {
        logmsg("executor-agent: capset: %s\n", strerror(errno));
        return -1;
    }
    /* Read the sets back: only what capget reports now is what the agent holds. */
    struct __user_cap_header_struct hv = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct v[2];
    memset(v, 0, sizeof v);
    if (syscall(SYS_capget, &hv, v) != 0) {
        logmsg("executor-agent: capget: %s\n", strerror(errno));
        return -1;
    }
    if ((v[0].effective | v[0].permitted | v[0].inheritable) & ~keep || v[1].effective || v[1].permitted ||
        v[1].inheritable) {
        logmsg("executor-agent: capabilities beyond KILL SETUID SETGID remain after capset\n");
        return -1;
    }
    return 0;
}

static void shutdown_all(void)
{
    struct plist killed = {0};
    sweep(&killed);
    plist_free(&killed);
    if (opt.listen != NULL)
        unlink(opt.listen);
}

struct pollref {
    int kind; /* 0 listen, 1 signal, 2 conn, 3 run out, 4 run err, 5 run stdin */
    void *ptr;
};

static int init_main(int argc, char **argv, char **envp)
{
    if (parse_init(argc, argv) != 0)
        return 2;
    g_self = getpid();
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g_boot_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        logmsg("executor-agent: PR_SET_CHILD_SUBREAPER: %s\n", strerror(errno));
    if (g_self != 1 && prctl(PR_SET_PDEATHSIG, SIGTERM) != 0)
        logmsg("executor-agent: PR_SET_PDEATHSIG: %s\n", strerror(errno));
    signal(SIGPIPE, SIG_IGN);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &mask, NULL) != 0 ||
        (g_sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
        logmsg("executor-agent: signalfd: %s\n", strerror(errno));
        return 1;
    }
    init_base_env(envp);
    prepare_dirs();
    g_listen_fd = open_listener();
    if (g_listen_fd < 0)
        return 1;
    if (drop_caps() != 0) {
        /* Fail closed: an agent that keeps CHOWN or DAC_OVERRIDE serves no session. The socket goes first, so
         * the host sees no agent, then the process exits with a code the host reports (PROTOCOL.md). */
        logmsg("executor-agent: cannot drop capabilities to KILL SETUID SETGID: refusing to serve\n");
        unlink(opt.listen);
        close(g_listen_fd);
        return EXIT_CAPS;
    }
    logmsg("executor-agent %s: listening on %s (pid %d, protocol %d)\n", AGENT_VERSION, opt.listen, (int)g_self,
           PROTO_VERSION);

    struct pollfd *pfd = NULL;
    struct pollref *ref = NULL;
    size_t pcap = 0;
    int64_t last_connected = now_ms();
    for (;;) {
        int64_t now = now_ms();
        int64_t next = now + 60000;
        /* Timers: deadlines, TERM->KILL escalation, drain bounds. */
        for (struct run *r = g_runs; r != NULL; r = r->next) {
            if (r->finished)
                continue;
            if (!r->exited && r->deadline_ms > 0 && !r->killing) {
                if (now >= r->deadline_ms)
                    start_kill(r, "timeout");
                else if (r->deadline_ms < next)
                    next = r->deadline_ms;
            }
            if (r->killing && !r->kill_sent) {
                if (now >= r->kill_at_ms) {
                    signal_group(r, SIGKILL);
                    r->kill_sent = 1;
                } else if (r->kill_at_ms < next) {
                    next = r->kill_at_ms;
                }
            }
            if (r->exited) {
                if (r->out_fd < 0 && r->err_fd < 0)
                    finish_run(r);
                else if (now >= r->drain_end_ms)
                    finish_run(r);
                else if (r->drain_end_ms < next)
                    next = r->drain_end_ms;
            }
        }
        for (struct conn *c = g_conns; c != NULL; c = c->next) {
            if (c->dead)
                continue;
            conn_flush(c);
            if (c->closing && !c->dead) {
                if (c->closing_deadline == 0)
                    c->closing_deadline = now + 1000;
                else if (now >= c->closing_deadline)
                    conn_kill(c);
                else if (c->closing_deadline < next)
                    next = c->closing_deadline;
            }
        }
        /* Drop the dead: finished foreground runs, closed connections. */
        for (struct run **pp = &g_runs; *pp != NULL;) {
            struct run *r = *pp;
            if (r->remove) {
                *pp = r->next;
                free_run(r);
            } else {
                pp = &r->next;
            }
        }
        for (struct conn **pp = &g_conns; *pp != NULL;) {
            struct conn *c = *pp;
            if (c->dead) {
                *pp = c->next;
                free(c->in);
                free(c->out.p);
                free(c);
                g_nconns--;
            } else {
                pp = &c->next;
            }
        }

        /* An ephemeral session whose host went away for good (a killed executor) ends itself: everything it
         * started is swept and the container exits, so `session gc` can remove it. Checked after the dead
         * connections are dropped, so the wait below is bounded by the limit as soon as the last one closes. */
        if (g_nconns > 0) {
            last_connected = now;
        } else if (opt.orphan_exit_ms > 0) {
            int64_t limit = last_connected + (int64_t)opt.orphan_exit_ms;
            if (now >= limit) {
                logmsg("executor-agent: no host connection for %llu ms: sweeping and exiting\n",
                       (unsigned long long)opt.orphan_exit_ms);
                shutdown_all();
                return 0;
            }
            if (limit < next)
                next = limit;
        }

        size_t need = 2 + (size_t)g_nconns;
        for (struct run *r = g_runs; r != NULL; r = r->next)
            need += 3;
        if (need > pcap) {
            /* Without room for every descriptor the loop cannot serve its runs, and retrying at once would spin:
             * out of memory here is fatal (the session's processes are swept, then the agent exits). */
            size_t nc = need * 2;
            struct pollfd *np = realloc(pfd, nc * sizeof *np);
            if (np != NULL)
                pfd = np;
            struct pollref *nr = np == NULL ? NULL : realloc(ref, nc * sizeof *nr);
            if (nr != NULL)
                ref = nr;
            if (np == NULL || nr == NULL) {
                logmsg("executor-agent: out of memory for %zu poll entries: sweeping and exiting\n", need);
                shutdown_all();
                free(pfd);
                free(ref);
                return 1;
            }
            pcap = nc;
        }
        size_t n = 0;
        pfd[n] = (struct pollfd){.fd = g_listen_fd, .events = POLLIN};
        ref[n++] = (struct pollref){0, NULL};
        pfd[n] = (struct pollfd){.fd = g_sig_fd, .events = POLLIN};
        ref[n++] = (struct pollref){1, NULL};
        for (struct conn *c = g_conns; c != NULL; c = c->next) {
            short ev = 0;
            if (!c->closing && conn_pending(c) < conn_high(c))
                ev |= POLLIN;
            if (conn_pending(c) > 0)
                ev |= POLLOUT;
            pfd[n] = (struct pollfd){.fd = c->fd, .events = ev};
            ref[n++] = (struct pollref){2, c};
        }
        for (struct run *r = g_runs; r != NULL; r = r->next) {
            int may_read = r->detached || r->conn == NULL || conn_pending(r->conn) < conn_high(r->conn);
            if (r->out_fd >= 0 && may_read) {
                pfd[n] = (struct pollfd){.fd = r->out_fd, .events = POLLIN};
                ref[n++] = (struct pollref){3, r};
            }
            if (r->err_fd >= 0 && may_read) {
                pfd[n] = (struct pollfd){.fd = r->err_fd, .events = POLLIN};
                ref[n++] = (struct pollref){4, r};
            }
            if (r->in_fd >= 0 && (r->in_buf.len > r->in_off)) {
                pfd[n] = (struct pollfd){.fd = r->in_fd, .events = POLLOUT};
                ref[n++] = (struct pollref){5, r};
            }
        }
        int64_t wait = next - now_ms();
        if (wait < 0)
            wait = 0;
        int rc = poll(pfd, n, (int)wait);
        if (rc < 0) {
            if (errno != EINTR)
                logmsg("executor-agent: poll: %s\n", strerror(errno));
            continue;
        }
        for (size_t i = 0; i < n && rc > 0; i++) {
            if (pfd[i].revents == 0)
                continue;
            short re = pfd[i].revents;
            struct conn *c;
            struct run *r;
            switch (ref[i].kind) {
            case 0:
                accept_conns();
                break;
            case 1: {
                struct signalfd_siginfo si;
                int stop = 0;
                while (read(g_sig_fd, &si, sizeof si) == (ssize_t)sizeof si)
                    if (si.ssi_signo != SIGCHLD)
                        stop = 1;
                reap();
                if (stop) {
                    logmsg("executor-agent: terminating: sweeping every process of the session\n");
                    shutdown_all();
                    return 0;
                }
                break;
            }
            case 2:
                c = ref[i].ptr;
                if (c->dead)
                    break;
                if (re & POLLOUT)
                    conn_flush(c);
                if (!c->dead && (re & (POLLIN | POLLHUP | POLLERR)))
                    conn_readable(c);
                break;
            case 3:
            case 4:
                r = ref[i].ptr;
                if (!r->finished)
                    pipe_readable(r, ref[i].kind - 3);
                break;
            case 5:
                r = ref[i].ptr;
                if (re & (POLLERR | POLLHUP))
                    close_fd(&r->in_fd);
                else
                    stdin_writable(r);
                break;
            }
        }
    }
}

/* ---------------------------------------------------------------- bridge */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int bridge_main(int argc, char **argv)
{
    int check = argc == 5 && strcmp(argv[4], "--check") == 0;
    if ((argc != 4 && !check) || strcmp(argv[2], "--connect") != 0) {
        logmsg("usage: agent bridge --connect SOCK [--check]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(argv[3]) >= sizeof sa.sun_path) {
        logmsg("executor-agent bridge: socket path too long\n");
        return 2;
    }
    strcpy(sa.sun_path, argv[3]);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        logmsg("executor-agent bridge: connect %s: %s\n", argv[3], strerror(errno));
        return 1;
    }
    if (check) /* only probing that the agent listens */
        return close(fd) == 0 ? 0 : 1;
    static uint8_t b[65536];
    int in_open = 1;
    for (;;) {
        struct pollfd p[2] = {{.fd = in_open ? 0 : -1, .events = POLLIN}, {.fd = fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (p[1].revents) {
            ssize_t n = read(fd, b, sizeof b);
            if (n <= 0)
                return n == 0 ? 0 : 1;
            if (write_all(1, b, (size_t)n) != 0)
                return 1;
        }
        if (in_open && p[0].revents) {
            ssize_t n = read(0, b, sizeof b);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                in_open = 0;
                if (shutdown(fd, SHUT_WR) != 0)
                    return 1;
            } else if (write_all(fd, b, (size_t)n) != 0) {
                return 1;
            }
        }
    }
}

int main(int argc, char **argv, char **envp)
{
    if (argc >= 2 && strcmp(argv[1], "init") == 0)
        return init_main(argc, argv, envp);
    if (argc >= 2 && strcmp(argv[1], "bridge") == 0)
        return bridge_main(argc, argv);
    if (argc >= 2 && strncmp(argv[1], "fs-", 3) == 0)
        return fileops_main(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "version") == 0) {
        printf("executor-agent %s protocol %d\n", AGENT_VERSION, PROTO_VERSION);
        return 0;
    }
    logmsg("usage: agent init|bridge|fs-*|version ...\n");
    return 2;
}
