/* File operations of the in-container agent: fs-stat, fs-read, fs-write (see fileops.h, PROTOCOL.md).
 *
 * They run as the session user, in a process of their own (the agent spawns `/.executor/agent fs-...`), so a
 * write can never do more than that user could do with a shell. Paths are resolved from `/` one component at a
 * time with openat(O_PATH|O_NOFOLLOW|O_DIRECTORY): a symlink anywhere on the way is refused and named, never
 * followed. Writes never modify a file in place: content goes to a private staging file in the same directory
 * (O_EXCL, 0600), gets the original mode and owner through its descriptor, is fsynced, renamed over the target,
 * the directory is fsynced, and the result is read back through the final name and its SHA-256 verified.
 *
 * Residual race, stated plainly: the checks (parents, target type, reviewed state) and the rename are separate
 * system calls. Another process of the session can still change the target between the last check and the
 * rename. Creating a new file is exact (RENAME_NOREPLACE or link(2)); replacing one is not a transaction.
 *
 * Command line (argv[1] is the subcommand; numbers are decimal unless stated):
 *
 *   fs-stat PATH
 *   fs-read PATH --max N
 *   fs-write PATH --expect EXPECT --max N [--new-mode OCTAL] [--content-sha256 HEX] [--parents]   (content on stdin)
 *
 *   EXPECT is `missing` or `regular:MODE:UID:GID:DEV:INO:SIZE:MTIME_NS:SHA256` with MODE in octal and SHA256 the
 *   lowercase hex digest, or `-` when the reviewed file was not readable.
 *
 * Output (one line of JSON on stdout; a STATE object is
 *   {"kind": K, "mode": int, "uid": int, "gid": int, "dev": int, "ino": int, "size": int, "mtime_ns": int,
 *    "sha256": "hex" | null}
 * with K one of missing, regular, directory, symlink, fifo, socket, char, block, other; all numbers are 0 and
 * sha256 null for `missing`; sha256 is set only for a regular file that could be read):
 *
 *   fs-stat   {"ok": true, "path": P, "state": STATE}
 *   fs-read   {"ok": true, "path": P, "state": STATE, "length": L, "truncated": bool} "\n" then exactly L raw
 *             bytes (the first L bytes of the file; state.sha256 is set only when the whole file was read)
 *   fs-write  {"ok": true, "path": P, "created": bool, "state": STATE, "mode_kept": bool, "owner_kept": bool,
 *              "dir_synced": bool, "verified": "name" | "descriptor"}
 *   error     {"error": CODE, "component": PATH_OR_EMPTY, "message": TEXT, "committed": bool[, "kind": K]
 *              [, "now": STATE | null]}
 *
 * Error codes: usage (exit 2), bad_path, symlink, not_directory, not_found, not_regular, changed_since_review,
 * unstable, too_large, content_mismatch, read_only, permission, no_space, file_size_limit, verify_failed, io
 * (exit 1). `committed` is true only when the rename already happened (a later fsync or the read-back failed):
 * the target then holds the staged inode but the write could not be confirmed, and `now` says what the path holds
 * at the moment of the error (its STATE with the digest of its content when readable; null when it cannot be
 * looked at). `committed` false means this call changed nothing on disk (its staging file is removed).
 */
#define _GNU_SOURCE
#include "fileops.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define FO_PATH_MAX 4095              /* bytes, without the NUL (Linux PATH_MAX - 1) */
#define FO_NAME_MAX 255               /* bytes per component (Linux NAME_MAX) */
#define FO_MAX_BYTES (1024ull << 20)  /* hard ceiling of --max for fs-write (the write.max_bytes range) */
#define FO_READ_MAX (64ull << 20)     /* hard ceiling of --max for fs-read: it buffers what it reads */
#define FO_CHUNK 65536
#define FO_OUT_CAP 65536
#define FO_MSG_CAP 1024
#define FO_STAT_TRIES 3
#define FO_STAGING_TRIES 8
#define FO_STAGING_SUFFIX ".executor-"
#define FO_STAGING_NAME_KEEP (FO_NAME_MAX - 1 - (int)(sizeof(FO_STAGING_SUFFIX) - 1) - 16)

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_USAGE = 2, EXIT_STDOUT = 3 };

/* ---------------------------------------------------------------- SHA-256 (FIPS 180-4) */

typedef struct {
    uint32_t h[8];
    uint64_t total;
    uint8_t block[64];
    size_t used;
} sha256_ctx;

static const uint32_t SHA_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror32(uint32_t x, unsigned n) { return (x >> n) | (x << (32u - n)); }

static void sha256_compress(sha256_ctx *c, const uint8_t *p)
{
    uint32_t w[64];
    for (unsigned i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
               (uint32_t)p[4 * i + 3];
    for (unsigned i = 16; i < 64; i++) {
        uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3];
    uint32_t e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (unsigned i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + SHA_K[i] + w[i];
        uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = cc;
        cc = b;
        b = a;
        a = t1 + t2;
    }
    c->h[0] += a;
    c->h[1] += b;
    c->h[2] += cc;
    c->h[3] += d;
    c->h[4] += e;
    c->h[5] += f;
    c->h[6] += g;
    c->h[7] += h;
}

static void sha256_init(sha256_ctx *c)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof(iv));
    c->total = 0;
    c->used = 0;
}

static void sha256_update(sha256_ctx *c, const uint8_t *p, size_t n)
{
    c->total += n;
    if (c->used > 0) {
        size_t take = 64 - c->used < n ? 64 - c->used : n;
        memcpy(c->block + c->used, p, take);
        c->used += take;
        p += take;
        n -= take;
        if (c->used < 64)
            return;
        sha256_compress(c, c->block);
        c->used = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        sha256_compress(c, p);
    if (n > 0) {
        memcpy(c->block, p, n);
        c->used = n;
    }
}

/* Writes 64 lowercase hex digits and a NUL into `hex`. */
static void sha256_final_hex(sha256_ctx *c, char hex[65])
{
    uint64_t bits = c->total * 8u;
    uint8_t pad = 0x80;
    sha256_update(c, &pad, 1);
    pad = 0;
    while (c->used != 56)
        sha256_update(c, &pad, 1);
    uint8_t len[8];
    for (unsigned i = 0; i < 8; i++)
        len[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(c, len, 8);
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < 8; i++)
        for (unsigned j = 0; j < 4; j++) {
            uint8_t byte = (uint8_t)(c->h[i] >> (24 - 8 * j));
            hex[8 * i + 2 * j] = digits[byte >> 4];
            hex[8 * i + 2 * j + 1] = digits[byte & 15];
        }
    hex[64] = '\0';
}

/* ---------------------------------------------------------------- output */

static struct {
    char buf[FO_OUT_CAP];
    size_t len;
    bool overflow;
} g_out;

static volatile sig_atomic_t g_committed; /* the rename happened: errors from here on say so */
static bool g_echo_stderr;                 /* fs-unpack: errors are also printed on stderr */
static void out_now(void);                 /* after a commit: what the path holds now (defined below) */

static void out_raw(const char *s, size_t n)
{
    if (n > sizeof(g_out.buf) - g_out.len) {
        g_out.overflow = true;
        return;
    }
    memcpy(g_out.buf + g_out.len, s, n);
    g_out.len += n;
}

static void out_lit(const char *s) { out_raw(s, strlen(s)); }

/* A JSON string. Bytes >= 0x80 pass through (paths arrive as UTF-8 from the host); controls are escaped. */
static void out_str(const char *s)
{
    out_lit("\"");
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            out_raw(esc, 2);
        } else if (*p < 0x20 || *p == 0x7f) {
            int n = snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)*p);
            if (n > 0 && (size_t)n < sizeof(esc))
                out_raw(esc, (size_t)n);
        } else {
            out_raw((const char *)p, 1);
        }
    }
    out_lit("\"");
}

static void out_u64(uint64_t v)
{
    char num[24];
    int n = snprintf(num, sizeof(num), "%" PRIu64, v);
    if (n > 0 && (size_t)n < sizeof(num))
        out_raw(num, (size_t)n);
}

static void out_i64(int64_t v)
{
    char num[24];
    int n = snprintf(num, sizeof(num), "%" PRId64, v);
    if (n > 0 && (size_t)n < sizeof(num))
        out_raw(num, (size_t)n);
}

static void out_key(const char *key)
{
    out_str(key);
    out_lit(":");
}

static bool write_all(int fd, const void *data, size_t n, int *err)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            *err = errno;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Sends the JSON line built in g_out (and an optional raw tail) to stdout. */
static int out_flush(int status, const void *tail, size_t tail_len)
{
    int err = 0;
    if (g_out.overflow) {
        static const char msg[] = "{\"error\":\"io\",\"component\":\"\",\"message\":\"result too large to print\","
                                  "\"committed\":false}\n";
        (void)write_all(1, msg, sizeof(msg) - 1, &err);
        return EXIT_STDOUT;
    }
    out_lit("\n");
    if (g_out.overflow || !write_all(1, g_out.buf, g_out.len, &err))
        return EXIT_STDOUT;
    if (tail_len > 0 && !write_all(1, tail, tail_len, &err))
        return EXIT_STDOUT;
    return status;
}

/* Reports an error and returns the exit status to use. `component` may be NULL; `kind` may be NULL. */
__attribute__((format(printf, 4, 5))) static int fail_kind(const char *code, const char *component,
                                                           const char *kind, const char *fmt, ...)
{
    char msg[FO_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        msg[0] = '\0';
    if (g_echo_stderr) {
        int e = 0;
        /* best effort: the JSON answer on stdout is the record; this line is for a person reading stderr */
        if (write_all(2, "fs-unpack: ", 11, &e) && write_all(2, msg, strlen(msg), &e))
            (void)write_all(2, "\n", 1, &e);
    }
    g_out.len = 0;
    g_out.overflow = false;
    out_lit("{");
    out_key("error");
    out_str(code);
    out_lit(",");
    out_key("component");
    out_str(component != NULL ? component : "");
    out_lit(",");
    out_key("message");
    out_str(msg);
    out_lit(",");
    out_key("committed");
    out_lit(g_committed ? "true" : "false");
    if (g_committed) {
        out_lit(",");
        out_key("now");
        out_now();
    }
    if (kind != NULL) {
        out_lit(",");
        out_key("kind");
        out_str(kind);
    }
    out_lit("}");
    return out_flush(strcmp(code, "usage") == 0 ? EXIT_USAGE : EXIT_ERROR, NULL, 0);
}

#define fail(code, component, ...) fail_kind((code), (component), NULL, __VA_ARGS__)

/* ---------------------------------------------------------------- file state */

struct fstate {
    const char *kind;
    unsigned mode;
    uint64_t uid, gid, dev, ino, size;
    int64_t mtime_ns;
    bool has_sha;
    char sha[65];
};

static const char *kind_of(mode_t m)
{
    if (S_ISREG(m))
        return "regular";
    if (S_ISDIR(m))
        return "directory";
    if (S_ISLNK(m))
        return "symlink";
    if (S_ISFIFO(m))
        return "fifo";
    if (S_ISSOCK(m))
        return "socket";
    if (S_ISCHR(m))
        return "char";
    if (S_ISBLK(m))
        return "block";
    return "other";
}

static int64_t ns_of(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000 + (int64_t)t->tv_nsec; }

static void state_from_stat(struct fstate *s, const struct stat *st)
{
    memset(s, 0, sizeof(*s));
    s->kind = kind_of(st->st_mode);
    s->mode = (unsigned)(st->st_mode & 07777);
    s->uid = st->st_uid;
    s->gid = st->st_gid;
    s->dev = st->st_dev;
    s->ino = st->st_ino;
    s->size = st->st_size < 0 ? 0 : (uint64_t)st->st_size;
    s->mtime_ns = ns_of(&st->st_mtim);
}

static void state_missing(struct fstate *s)
{
    memset(s, 0, sizeof(*s));
    s->kind = "missing";
}

static void out_state(const struct fstate *s)
{
    out_lit("{");
    out_key("kind");
    out_str(s->kind);
    out_lit(",");
    out_key("mode");
    out_u64(s->mode);
    out_lit(",");
    out_key("uid");
    out_u64(s->uid);
    out_lit(",");
    out_key("gid");
    out_u64(s->gid);
    out_lit(",");
    out_key("dev");
    out_u64(s->dev);
    out_lit(",");
    out_key("ino");
    out_u64(s->ino);
    out_lit(",");
    out_key("size");
    out_u64(s->size);
    out_lit(",");
    out_key("mtime_ns");
    out_i64(s->mtime_ns);
    out_lit(",");
    out_key("sha256");
    if (s->has_sha)
        out_str(s->sha);
    else
        out_lit("null");
    out_lit("}");
}

/* Same file, same content as far as the inode can tell (ctime moves on every change and cannot be set). */
static bool same_version(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mode == b->st_mode && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
           a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* ---------------------------------------------------------------- errno → error */

static const char *errno_code(int e)
{
    switch (e) {
    case EROFS:
        return "read_only";
    case EACCES:
    case EPERM:
        return "permission";
    case ENOSPC:
    case EDQUOT:
        return "no_space";
    case EFBIG:
        return "file_size_limit";
    case ENOENT:
        return "not_found";
    case ENOTDIR:
        return "not_directory";
    case ENAMETOOLONG:
        return "bad_path";
    default:
        return "io";
    }
}

static const char *errno_hint(int e)
{
    switch (e) {
    case EROFS:
        return "the filesystem holding it is mounted read-only, like the image's root: write under the "
               "workspace or another writable mount instead";
    case EACCES:
    case EPERM:
        return "the session user may not do this here: pick a path the session user owns (the workspace)";
    case ENOSPC:
    case EDQUOT:
        return "the filesystem is full: free space or write smaller content";
    case EFBIG:
        return "the session's file-size limit is smaller than the content";
    case ENOENT:
        return "it does not exist: create the directory first";
    case ENOTDIR:
        return "it is not a directory";
    default:
        return "unexpected error";
    }
}

static int fail_errno(int e, const char *component, const char *what)
{
    return fail(errno_code(e), component, "%s %s failed: %s (%s)", what, component != NULL ? component : "",
                strerror(e), errno_hint(e));
}

/* ---------------------------------------------------------------- path walk */

/* fs-write --parents: the walk creates missing parent directories (mode 0755 minus the umask), as the user. */
static bool g_make_parents;

struct walk {
    int dirfd;              /* O_PATH descriptor of the parent directory */
    char name[FO_NAME_MAX + 1];
    char path[FO_PATH_MAX + 1]; /* the whole path, for messages */
    char prefix[FO_PATH_MAX + 1];
};

/* Validates PATH and opens its parent directory without following any symlink. Returns 0 or an exit status
 * (the error is already printed). The final component is left unresolved in w->name. */
static int walk_parents(const char *path, struct walk *w)
{
    w->dirfd = -1;
    size_t len = strnlen(path, FO_PATH_MAX + 1);
    if (len > FO_PATH_MAX)
        return fail("bad_path", "", "path is longer than %d bytes; use a shorter path", FO_PATH_MAX);
    memcpy(w->path, path, len + 1);
    if (path[0] != '/')
        return fail("bad_path", path, "path %s is not absolute; the host resolves paths before sending them", path);
    if (len < 2 || path[len - 1] == '/')
        return fail("bad_path", path, "path %s does not name a file (it ends with '/')", path);

    int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fail_errno(errno, "/", "opening");
    const char *p = path + 1;
    size_t prefix_len = 0;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash != NULL ? (size_t)(slash - p) : strlen(p);
        char comp[FO_NAME_MAX + 1];
        /* the prefix includes this component, so messages name exactly the offending one */
        memcpy(w->prefix, path, (size_t)(p - path) + n);
        prefix_len = (size_t)(p - path) + n;
        w->prefix[prefix_len] = '\0';
        if (n == 0 || n > FO_NAME_MAX || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
            close(fd);
            return fail("bad_path", w->prefix,
                        "path %s has an empty, '.', '..' or over-long (> %d bytes) component; send a normalised path",
                        path, FO_NAME_MAX);
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        if (slash == NULL) {
            memcpy(w->name, comp, n + 1);
            w->dirfd = fd;
            return 0;
        }
        int next = openat(fd, comp, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && g_make_parents) {
            if (mkdirat(fd, comp, 0755) != 0 && errno != EEXIST) {
                int e = errno;
                close(fd);
                return fail_errno(e, w->prefix, "creating directory");
            }
            next = openat(fd, comp, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        }
        if (next < 0) {
            int e = errno;
            struct stat st;
            if (fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
                close(fd);
                return fail_kind("symlink", w->prefix, "symlink",
                                 "%s is a symbolic link; writes never follow symlinks: use the real path it points to",
                                 w->prefix);
            }
            close(fd);
            if (e == ENOTDIR || e == ELOOP)
                return fail("not_directory", w->prefix, "%s is not a directory, so %s cannot exist", w->prefix,
                            path);
            if (e == ENOENT)
                return fail("not_found", w->prefix, "directory %s does not exist; create it first", w->prefix);
            return fail_errno(e, w->prefix, "opening directory");
        }
        close(fd);
        fd = next;
        p = slash + 1;
    }
}

/* ---------------------------------------------------------------- reading a regular file */

/* Hashes (and optionally copies the first `keep` bytes of) an open regular file. Returns 0 or an errno. */
static int hash_fd(int fd, sha256_ctx *c, uint8_t *copy, size_t keep, size_t *copied)
{
    static uint8_t chunk[FO_CHUNK];
    size_t have = 0;
    off_t off = 0;
    for (;;) {
        ssize_t r = pread(fd, chunk, sizeof(chunk), off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (r == 0)
            break;
        sha256_update(c, chunk, (size_t)r);
        if (copy != NULL && have < keep) {
            size_t take = keep - have < (size_t)r ? keep - have : (size_t)r;
            memcpy(copy + have, chunk, take);
            have += take;
        }
        off += r;
    }
    if (copied != NULL)
        *copied = have;
    return 0;
}

/* The state of `name` in `dirfd` (lstat semantics), with the SHA-256 of a regular file's content.
 * Optionally copies up to `keep` bytes into `copy`. Retries when the file changes while it is read.
 * Returns 0 or an exit status (the error is printed). `st_out` receives the lstat of the version hashed. */
static int stat_target(const struct walk *w, struct fstate *s, struct stat *st_out, uint8_t *copy, size_t keep,
                       size_t *copied)
{
    for (int attempt = 0; attempt < FO_STAT_TRIES; attempt++) {
        struct stat st;
        if (fstatat(w->dirfd, w->name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) {
                state_missing(s);
                memset(st_out, 0, sizeof(*st_out));
                if (copied != NULL)
                    *copied = 0;
                return 0;
            }
            return fail_errno(errno, w->path, "stat of");
        }
        state_from_stat(s, &st);
        *st_out = st;
        if (copied != NULL)
            *copied = 0;
        if (!S_ISREG(st.st_mode))
            return 0;
        /* O_NONBLOCK: if the name was swapped for a fifo since the fstatat, the open must not hang */
        int fd = openat(w->dirfd, w->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
            if (errno == EACCES)
                return 0; /* unreadable: state without a digest */
            if (errno == ENOENT || errno == ELOOP || errno == ENXIO)
                continue; /* replaced since the fstatat */
            return fail_errno(errno, w->path, "opening");
        }
        struct stat before, after;
        if (fstat(fd, &before) != 0) {
            int e = errno;
            close(fd);
            return fail_errno(e, w->path, "fstat of");
        }
        if (!same_version(&st, &before)) {
            close(fd);
            continue;
        }
        sha256_ctx c;
        sha256_init(&c);
        int e = hash_fd(fd, &c, copy, keep, copied);
        if (e == 0 && fstat(fd, &after) != 0)
            e = errno;
        close(fd);
        if (e != 0)
            return fail_errno(e, w->path, "reading");
        if (!same_version(&before, &after))
            continue;
        sha256_final_hex(&c, s->sha);
        s->has_sha = true;
        return 0;
    }
    return fail("unstable", w->path, "%s kept changing while it was read (%d tries); try again when it is quiet",
                w->path, FO_STAT_TRIES);
}

static const struct walk *g_commit_walk; /* set with g_committed: the path whose state `now` reports */

/* The state of the committed path, printed quietly (no error output of its own): a digest when it can be read
 * unchanged, no digest when it cannot, null when it cannot even be looked at. */
static void out_now(void)
{
    const struct walk *w = g_commit_walk;
    struct stat st, before, after;
    if (w == NULL || fstatat(w->dirfd, w->name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (w != NULL && errno == ENOENT) {
            struct fstate gone;
            state_missing(&gone);
            out_state(&gone);
            return;
        }
        out_lit("null");
        return;
    }
    struct fstate s;
    state_from_stat(&s, &st);
    if (S_ISREG(st.st_mode)) {
        int fd = openat(w->dirfd, w->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd >= 0) {
            sha256_ctx c;
            sha256_init(&c);
            if (fstat(fd, &before) == 0 && hash_fd(fd, &c, NULL, 0, NULL) == 0 && fstat(fd, &after) == 0 &&
                same_version(&before, &after)) {
                state_from_stat(&s, &before);
                sha256_final_hex(&c, s.sha);
                s.has_sha = true;
            }
            close(fd);
        }
    }
    out_state(&s);
}

/* ---------------------------------------------------------------- argument parsing */

static bool parse_u64(const char *s, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == NULL || *end != '\0')
        return false;
    *out = v;
    return true;
}

static bool parse_i64(const char *s, int64_t *out)
{
    if (s == NULL || (*s != '-' && (*s < '0' || *s > '9')))
        return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == NULL || *end != '\0' || end == s)
        return false;
    *out = v;
    return true;
}

static bool parse_mode(const char *s, unsigned *out)
{
    if (s == NULL || *s < '0' || *s > '7')
        return false;
    errno = 0;
    char *end = NULL;
    unsigned long v = strtoul(s, &end, 8);
    if (errno != 0 || end == NULL || *end != '\0' || v > 07777)
        return false;
    *out = (unsigned)v;
    return true;
}

static bool is_hex64(const char *s)
{
    if (s == NULL || strlen(s) != 64)
        return false;
    for (const char *p = s; *p != '\0'; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

/* EXPECT: `missing` or `regular:MODE:UID:GID:DEV:INO:SIZE:MTIME_NS:SHA256` (SHA256 may be `-`). */
static bool parse_expect(const char *s, struct fstate *e)
{
    if (strcmp(s, "missing") == 0) {
        state_missing(e);
        return true;
    }
    char buf[256];
    size_t len = strnlen(s, sizeof(buf));
    if (len >= sizeof(buf))
        return false;
    memcpy(buf, s, len + 1);
    char *fields[9];
    size_t nf = 0;
    char *p = buf;
    for (;;) {
        if (nf == 9)
            return false;
        fields[nf++] = p;
        char *colon = strchr(p, ':');
        if (colon == NULL)
            break;
        *colon = '\0';
        p = colon + 1;
    }
    if (nf != 9 || strcmp(fields[0], "regular") != 0)
        return false;
    memset(e, 0, sizeof(*e));
    e->kind = "regular";
    if (!parse_mode(fields[1], &e->mode) || !parse_u64(fields[2], &e->uid) || !parse_u64(fields[3], &e->gid) ||
        !parse_u64(fields[4], &e->dev) || !parse_u64(fields[5], &e->ino) || !parse_u64(fields[6], &e->size) ||
        !parse_i64(fields[7], &e->mtime_ns))
        return false;
    if (strcmp(fields[8], "-") == 0)
        return true;
    if (!is_hex64(fields[8]))
        return false;
    memcpy(e->sha, fields[8], 65);
    e->has_sha = true;
    return true;
}

struct opts {
    const char *path;
    const char *expect;
    const char *content_sha;
    uint64_t max;
    bool have_max;
    unsigned new_mode;
};

static int parse_opts(int argc, char **argv, const char *sub, bool write_opts, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    o->new_mode = 0644;
    bool have_mode = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (strcmp(a, "--max") == 0 && has_value && !o->have_max) {
            if (!parse_u64(argv[++i], &o->max))
                return fail("usage", "", "%s: --max wants a byte count, got %s", sub, argv[i]);
            o->have_max = true;
        } else if (write_opts && strcmp(a, "--expect") == 0 && has_value && o->expect == NULL) {
            o->expect = argv[++i];
        } else if (write_opts && strcmp(a, "--new-mode") == 0 && has_value && !have_mode) {
            if (!parse_mode(argv[++i], &o->new_mode))
                return fail("usage", "", "%s: --new-mode wants an octal mode <= 7777, got %s", sub, argv[i]);
            have_mode = true;
        } else if (write_opts && strcmp(a, "--parents") == 0 && !g_make_parents) {
            g_make_parents = true;
        } else if (write_opts && strcmp(a, "--content-sha256") == 0 && has_value && o->content_sha == NULL) {
            o->content_sha = argv[++i];
            if (!is_hex64(o->content_sha))
                return fail("usage", "", "%s: --content-sha256 wants 64 lowercase hex digits", sub);
        } else if (a[0] != '-' && o->path == NULL) {
            o->path = a;
        } else {
            return fail("usage", "", "%s: unexpected or repeated argument %.64s", sub, a);
        }
    }
    if (o->path == NULL)
        return fail("usage", "", "%s: missing PATH", sub);
    return 0;
}

/* ---------------------------------------------------------------- fs-stat */

static int cmd_stat(int argc, char **argv)
{
    struct opts o;
    int rc = parse_opts(argc, argv, "fs-stat", false, &o);
    if (rc != 0)
        return rc;
    if (o.have_max)
        return fail("usage", "", "fs-stat takes only PATH");
    struct walk w;
    rc = walk_parents(o.path, &w);
    if (rc != 0)
        return rc;
    struct fstate s;
    struct stat st;
    rc = stat_target(&w, &s, &st, NULL, 0, NULL);
    close(w.dirfd);
    if (rc != 0)
        return rc;
    out_lit("{\"ok\":true,");
    out_key("path");
    out_str(w.path);
    out_lit(",");
    out_key("state");
    out_state(&s);
    out_lit("}");
    return out_flush(EXIT_OK, NULL, 0);
}

/* ---------------------------------------------------------------- fs-read */

static int cmd_read(int argc, char **argv)
{
    struct opts o;
    int rc = parse_opts(argc, argv, "fs-read", false, &o);
    if (rc != 0)
        return rc;
    if (!o.have_max || o.max > FO_READ_MAX)
        return fail("usage", "", "fs-read needs --max N with N <= %llu", (unsigned long long)FO_READ_MAX);
    struct walk w;
    rc = walk_parents(o.path, &w);
    if (rc != 0)
        return rc;
    /* bounded by --max, itself capped: never proportional to the file */
    uint8_t *buf = malloc(o.max > 0 ? (size_t)o.max : 1);
    if (buf == NULL) {
        close(w.dirfd);
        return fail("io", w.path, "out of memory for a %llu-byte read", (unsigned long long)o.max);
    }
    struct fstate s;
    struct stat st;
    size_t copied = 0;
    rc = stat_target(&w, &s, &st, buf, (size_t)o.max, &copied);
    close(w.dirfd);
    if (rc == 0 && strcmp(s.kind, "regular") != 0) {
        if (strcmp(s.kind, "missing") == 0)
            rc = fail("not_found", w.path, "%s does not exist", w.path);
        else
            rc = fail_kind("not_regular", w.path, s.kind, "%s is a %s, not a regular file", w.path, s.kind);
    } else if (rc == 0 && !s.has_sha) {
        rc = fail("permission", w.path, "%s is not readable by the session user", w.path);
    }
    if (rc != 0) {
        free(buf);
        return rc;
    }
    bool truncated = s.size > copied;
    if (truncated)
        s.has_sha = false; /* the digest covers the whole file only when the whole file is sent */
    out_lit("{\"ok\":true,");
    out_key("path");
    out_str(w.path);
    out_lit(",");
    out_key("state");
    out_state(&s);
    out_lit(",");
    out_key("length");
    out_u64(copied);
    out_lit(",");
    out_key("truncated");
    out_lit(truncated ? "true" : "false");
    out_lit("}");
    rc = out_flush(EXIT_OK, buf, copied);
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------- fs-write */

/* What a termination signal must clean up: the staging name in the parent directory. */
static volatile sig_atomic_t g_stage_dirfd = -1;
static char g_stage_name[FO_NAME_MAX + 1];

static void on_term(int sig)
{
    if (g_stage_dirfd >= 0 && !g_committed)
        (void)unlinkat((int)g_stage_dirfd, g_stage_name, 0);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int install_cleanup_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_term;
    if (sigemptyset(&sa.sa_mask) != 0)
        return -1;
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        if (sigaction(sigs[i], &sa, NULL) != 0)
            return -1;
    /* a file-size limit must surface as EFBIG (then cleaned up), not as a silent death by SIGXFSZ */
    if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR || signal(SIGPIPE, SIG_IGN) == SIG_ERR)
        return -1;
    return 0;
}

static void stage_forget(void)
{
    g_stage_dirfd = -1;
}

static void stage_unlink(int dirfd)
{
    if (g_stage_dirfd >= 0) {
        /* best effort: the error being reported matters more than a failure to clean up */
        (void)unlinkat(dirfd, g_stage_name, 0);
        stage_forget();
    }
}

/* Lists the fields in which `now` differs from `want` into msg. */
static void describe_change(const struct fstate *want, const struct fstate *now, char *msg, size_t cap)
{
    size_t used = 0;
#define ADD(...)                                                                                                   \
    do {                                                                                                           \
        if (used < cap) {                                                                                          \
            int n_ = snprintf(msg + used, cap - used, __VA_ARGS__);                                                \
            if (n_ > 0)                                                                                            \
                used += (size_t)n_;                                                                                \
        }                                                                                                          \
    } while (0)
    msg[0] = '\0';
    if (strcmp(want->kind, now->kind) != 0) {
        ADD("kind %s -> %s; ", want->kind, now->kind);
    } else {
        if (want->mode != now->mode)
            ADD("mode %04o -> %04o; ", want->mode, now->mode);
        if (want->uid != now->uid || want->gid != now->gid)
            ADD("owner %" PRIu64 ":%" PRIu64 " -> %" PRIu64 ":%" PRIu64 "; ", want->uid, want->gid, now->uid,
                now->gid);
        if (want->dev != now->dev || want->ino != now->ino)
            ADD("inode (replaced by another file); ");
        if (want->size != now->size)
            ADD("size %" PRIu64 " -> %" PRIu64 "; ", want->size, now->size);
        if (want->mtime_ns != now->mtime_ns)
            ADD("mtime %" PRId64 " -> %" PRId64 "; ", want->mtime_ns, now->mtime_ns);
        if (want->has_sha != now->has_sha || (want->has_sha && strcmp(want->sha, now->sha) != 0))
            ADD("content (sha256); ");
    }
#undef ADD
    if (used >= 2 && used < cap)
        msg[used - 2] = '\0';
}

static bool states_equal(const struct fstate *a, const struct fstate *b)
{
    if (strcmp(a->kind, b->kind) != 0)
        return false;
    if (strcmp(a->kind, "missing") == 0)
        return true;
    return a->mode == b->mode && a->uid == b->uid && a->gid == b->gid && a->dev == b->dev && a->ino == b->ino &&
           a->size == b->size && a->mtime_ns == b->mtime_ns && a->has_sha == b->has_sha &&
           (!a->has_sha || strcmp(a->sha, b->sha) == 0);
}

/* A fresh random staging name for `name` in g_stage_name. */
static int stage_name(const char *name, const char *path)
{
    uint64_t rnd;
    ssize_t got;
    do
        got = getrandom(&rnd, sizeof(rnd), 0);
    while (got < 0 && errno == EINTR);
    if (got != (ssize_t)sizeof(rnd))
        return fail("io", path, "getrandom failed: %s", got < 0 ? strerror(errno) : "short read");
    int n = snprintf(g_stage_name, sizeof(g_stage_name), ".%.*s%s%016" PRIx64, FO_STAGING_NAME_KEEP, name,
                     FO_STAGING_SUFFIX, rnd);
    if (n < 0 || (size_t)n >= sizeof(g_stage_name))
        return fail("bad_path", path, "staging name for %s does not fit", path);
    return 0;
}

static int create_staging(int dirfd, const char *name, const char *path, int *fd_out)
{
    for (int i = 0; i < FO_STAGING_TRIES; i++) {
        int rc = stage_name(name, path);
        if (rc != 0)
            return rc;
        /* the handler may unlink the name as soon as it exists, never before */
        int fd = openat(dirfd, g_stage_name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            g_stage_dirfd = dirfd;
            *fd_out = fd;
            return 0;
        }
        if (errno == EEXIST)
            continue;
        return fail_errno(errno, path, "creating a staging file next to");
    }
    return fail("io", path, "could not create a unique staging file next to %s", path);
}

/* Copies stdin into fd, at most `max` bytes, hashing it. Returns 0 or an exit status (printed). */
static int copy_stdin(int fd, uint64_t max, const char *path, sha256_ctx *c, uint64_t *total)
{
    static uint8_t chunk[FO_CHUNK];
    *total = 0;
    for (;;) {
        ssize_t r = read(0, chunk, sizeof(chunk));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return fail("io", path, "reading the content from stdin failed: %s", strerror(errno));
        }
        if (r == 0)
            return 0;
        if ((uint64_t)r > max - *total)
            return fail("too_large", path, "content is larger than the cap of %llu bytes; nothing was written",
                        (unsigned long long)max);
        sha256_update(c, chunk, (size_t)r);
        int e = 0;
        if (!write_all(fd, chunk, (size_t)r, &e))
            return fail_errno(e, path, "writing the staging file for");
        *total += (uint64_t)r;
    }
}

/* Renames the staging file over `name`; with `no_replace`, fails with EEXIST if something appeared there. */
static int commit_rename(int dirfd, const char *name, bool no_replace)
{
    if (!no_replace)
        return renameat(dirfd, g_stage_name, dirfd, name);
    if (renameat2(dirfd, g_stage_name, dirfd, name, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
    /* a filesystem without RENAME_NOREPLACE: link(2) never replaces either */
    if (linkat(dirfd, g_stage_name, dirfd, name, 0) != 0)
        return -1;
    if (unlinkat(dirfd, g_stage_name, 0) != 0)
        return 0; /* the content is in place under the final name; a stray second name is harmless */
    return 0;
}

static int cmd_write(int argc, char **argv)
{
    struct opts o;
    int rc = parse_opts(argc, argv, "fs-write", true, &o);
    if (rc != 0)
        return rc;
    if (o.expect == NULL || !o.have_max)
        return fail("usage", "", "fs-write needs --expect STATE and --max N");
    if (o.max > FO_MAX_BYTES)
        return fail("usage", "", "fs-write --max must be <= %llu", (unsigned long long)FO_MAX_BYTES);
    struct fstate want;
    if (!parse_expect(o.expect, &want))
        return fail("usage", "", "fs-write --expect wants 'missing' or "
                                 "'regular:MODE:UID:GID:DEV:INO:SIZE:MTIME_NS:SHA256'");
    if (install_cleanup_handlers() != 0)
        return fail("io", "", "installing signal handlers failed: %s", strerror(errno));

    struct walk w;
    rc = walk_parents(o.path, &w);
    if (rc != 0)
        return rc;
    /* O_PATH descriptors cannot be fsynced; "." reopens the very directory we walked to, not a path */
    int dirfd = openat(w.dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool can_sync_dir = dirfd >= 0;
    if (dirfd < 0) {
        if (errno != EACCES) {
            int e = errno;
            close(w.dirfd);
            return fail_errno(e, w.prefix, "opening directory");
        }
        dirfd = w.dirfd; /* search-only directory: still writable, just not fsyncable */
    } else {
        close(w.dirfd);
        w.dirfd = dirfd;
    }

    struct fstate now;
    struct stat checked;
    rc = stat_target(&w, &now, &checked, NULL, 0, NULL);
    if (rc != 0)
        goto out_dir;
    if (strcmp(now.kind, "symlink") == 0) {
        rc = fail_kind("symlink", w.path, "symlink",
                       "%s is a symbolic link; writes never follow symlinks: write to the real path instead", w.path);
        goto out_dir;
    }
    if (strcmp(now.kind, "regular") != 0 && strcmp(now.kind, "missing") != 0) {
        rc = fail_kind("not_regular", w.path, now.kind,
                       "%s is a %s, not a regular file; only regular files are written", w.path, now.kind);
        goto out_dir;
    }
    if (!states_equal(&want, &now)) {
        char what[512];
        describe_change(&want, &now, what, sizeof(what));
        rc = fail("changed_since_review", w.path,
                  "%s changed since it was reviewed (%s); nothing was written: prepare the write again", w.path,
                  what);
        goto out_dir;
    }
    bool creating = strcmp(now.kind, "missing") == 0;
    /* The rename needs only the directory's permission; a shell write needs the file's. Refuse what the session
     * user could not write in place (chmod -w), like a shell redirect would. */
    if (!creating && faccessat(dirfd, w.name, W_OK, AT_EACCESS) != 0) {
        int e = errno;
        if (e != EACCES && e != EPERM)
            rc = fail_errno(e, w.path, "access check of");
        else if (want.uid != (uint64_t)geteuid())
            /* Only its owner (or root) may change its mode: advising chmod would name a step that fails. */
            rc = fail("permission", w.path,
                      "%s is not writable by the session user (mode %o, owned by uid %llu); nothing was written: "
                      "the session user cannot change another user's file, so write a new file elsewhere",
                      w.path, want.mode, (unsigned long long)want.uid);
        else
            rc = fail("permission", w.path,
                      "%s is not writable by the session user (mode %o); nothing was written: change its mode "
                      "first (chmod u+w) if it should be replaced",
                      w.path, want.mode);
        goto out_dir;
    }

    int fd = -1;
    rc = create_staging(dirfd, w.name, w.path, &fd);
    if (rc != 0)
        goto out_dir;

    sha256_ctx c;
    sha256_init(&c);
    uint64_t total = 0;
    char digest[65];
    rc = copy_stdin(fd, o.max, w.path, &c, &total);
    if (rc != 0)
        goto out_stage;
    sha256_final_hex(&c, digest);
    if (o.content_sha != NULL && strcmp(o.content_sha, digest) != 0) {
        rc = fail("content_mismatch", w.path,
                  "the content received (sha256 %s) is not the content prepared (sha256 %s); nothing was written",
                  digest, o.content_sha);
        goto out_stage;
    }

    unsigned mode = creating ? o.new_mode : want.mode;
    bool owner_kept = true;
    if (!creating) {
        struct stat sst;
        if (fstat(fd, &sst) != 0) {
            rc = fail_errno(errno, w.path, "fstat of the staging file for");
            goto out_stage;
        }
        /* before fchmod: a chown clears set-id bits */
        if ((uint64_t)sst.st_uid != want.uid || (uint64_t)sst.st_gid != want.gid) {
            if (fchown(fd, (uid_t)want.uid, (gid_t)want.gid) != 0) {
                if (errno != EPERM) {
                    rc = fail_errno(errno, w.path, "fchown of the staging file for");
                    goto out_stage;
                }
                owner_kept = false; /* an unprivileged user cannot give files away: the user keeps it */
            }
        }
    }
    if (fchmod(fd, (mode_t)mode) != 0) {
        rc = fail_errno(errno, w.path, "fchmod of the staging file for");
        goto out_stage;
    }
    if (fsync(fd) != 0) {
        rc = fail_errno(errno, w.path, "fsync of the staging file for");
        goto out_stage;
    }
    struct stat staged;
    if (fstat(fd, &staged) != 0) {
        rc = fail_errno(errno, w.path, "fstat of the staging file for");
        goto out_stage;
    }
    bool mode_kept = (unsigned)(staged.st_mode & 07777) == mode;

    /* narrow the window: the target must still be the version compared above (ctime catches any change) */
    struct stat again;
    if (fstatat(dirfd, w.name, &again, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT || !creating) {
            rc = errno == ENOENT ? fail("changed_since_review", w.path,
                                        "%s was removed while the content was staged; nothing was written: "
                                        "prepare the write again",
                                        w.path)
                                 : fail_errno(errno, w.path, "stat of");
            goto out_stage;
        }
    } else if (creating || !same_version(&checked, &again)) {
        rc = fail("changed_since_review", w.path,
                  "%s changed while the content was staged; nothing was written: prepare the write again", w.path);
        goto out_stage;
    }

    if (commit_rename(dirfd, w.name, creating) != 0) {
        int e = errno;
        if (e == EEXIST)
            rc = fail("changed_since_review", w.path,
                      "%s appeared while the content was staged; nothing was written: prepare the write again",
                      w.path);
        else if (e == EISDIR || e == ENOTEMPTY)
            rc = fail_kind("not_regular", w.path, "directory", "%s became a directory; nothing was written", w.path);
        else
            rc = fail_errno(e, w.path, "renaming the staging file over");
        goto out_stage;
    }
    g_commit_walk = &w;
    g_committed = true;
    stage_forget();

    bool dir_synced = false;
    if (can_sync_dir) {
        if (fsync(dirfd) == 0)
            dir_synced = true;
        else if (errno != EINVAL) {
            rc = fail_errno(errno, w.path, "fsync of the directory holding");
            close(fd);
            goto out_dir;
        }
    }

    /* read back through the final name: what a reader of PATH now gets */
    struct fstate result;
    struct stat final_st;
    const char *verified = "name";
    int rfd = openat(dirfd, w.name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    int vfd = rfd;
    if (rfd < 0) {
        if (errno != EACCES) {
            rc = fail_errno(errno, w.path, "reading back");
            close(fd);
            goto out_dir;
        }
        /* a mode without read permission for the user: verify the inode behind the name, through our descriptor */
        if (fstatat(dirfd, w.name, &final_st, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = fail_errno(errno, w.path, "stat after writing");
            close(fd);
            goto out_dir;
        }
        verified = "descriptor";
        vfd = fd;
    } else if (fstat(rfd, &final_st) != 0) {
        rc = fail_errno(errno, w.path, "fstat after writing");
        close(rfd);
        close(fd);
        goto out_dir;
    }
    if (final_st.st_dev != staged.st_dev || final_st.st_ino != staged.st_ino) {
        rc = fail("verify_failed", w.path,
                  "%s was replaced by another file right after the write; check it and write again", w.path);
        if (rfd >= 0)
            close(rfd);
        close(fd);
        goto out_dir;
    }
    sha256_ctx vc;
    sha256_init(&vc);
    int e = hash_fd(vfd, &vc, NULL, 0, NULL);
    if (rfd >= 0)
        close(rfd);
    if (close(fd) != 0 && e == 0)
        e = errno;
    if (e != 0) {
        rc = fail_errno(e, w.path, "reading back");
        goto out_dir;
    }
    state_from_stat(&result, &final_st);
    sha256_final_hex(&vc, result.sha);
    result.has_sha = true;
    if (strcmp(result.sha, digest) != 0 || result.size != total) {
        rc = fail("verify_failed", w.path,
                  "read-back of %s does not match what was written (sha256 %s, expected %s); the write may have "
                  "been lost: check the mount",
                  w.path, result.sha, digest);
        goto out_dir;
    }
    close(dirfd);
    out_lit("{\"ok\":true,");
    out_key("path");
    out_str(w.path);
    out_lit(",");
    out_key("created");
    out_lit(creating ? "true" : "false");
    out_lit(",");
    out_key("state");
    out_state(&result);
    out_lit(",");
    out_key("mode_kept");
    out_lit(mode_kept ? "true" : "false");
    out_lit(",");
    out_key("owner_kept");
    out_lit(owner_kept ? "true" : "false");
    out_lit(",");
    out_key("dir_synced");
    out_lit(dir_synced ? "true" : "false");
    out_lit(",");
    out_key("verified");
    out_str(verified);
    out_lit("}");
    return out_flush(EXIT_OK, NULL, 0);

out_stage:
    stage_unlink(dirfd);
    close(fd);
out_dir:
    close(dirfd);
    return rc;
}

/* ---------------------------------------------------------------- fs-unpack */

/* fs-unpack DEST: writes the entries of an entry stream read from stdin under folder DEST (made if missing).
 *
 * The host turns an upload's archive into this stream (executor/tools/archive.py, canonical_entries) and the gate
 * judges exactly its entries; this writes exactly those and nothing else. Stream (big-endian):
 *
 *   "XENTRY1\n" | u32 COUNT | COUNT headers | the contents of the file entries, in header order
 *   header:  u8 KIND ('d' folder, 'f' file, 'l' symlink) | u16 MODE (<= 0777) | u16 LEN | LEN bytes of PATH
 *            | KIND 'l': u16 LEN | LEN bytes of the link's text | KIND 'f': u64 SIZE
 *
 * PATH is relative and normalised (no empty, '.' or '..' component, no leading or trailing '/'). Every path is
 * walked from DEST one component at a time with openat(O_PATH|O_NOFOLLOW|O_DIRECTORY): a symlink anywhere on the
 * way (one the workspace already held, or one an earlier entry made) is refused, never followed. All headers are
 * checked against the disk before anything is written, so an entry that cannot be written as judged refuses the
 * whole upload. Files and links are staged under a private name (O_EXCL) and renamed over the final name (a symlink
 * or file there is replaced, never written through); a folder that exists is kept as it is; folders made here get
 * their mode (minus the umask) at the end. DEST itself is walked from `/` (or from the working folder when
 * relative) the same way. Answer: {"ok": true, "path": DEST, "entries": N, "files": F, "bytes": B}; errors as for
 * the other commands, also printed on stderr. Residual race: as for fs-write, another process of the session can
 * change a folder between the check and the write; the write still never follows a symlink. */

#define FO_UNPACK_MAGIC "XENTRY1\n"
#define FO_UNPACK_MAX_ENTRIES 1000000u
#define FO_UNPACK_TABLE_MAX (64u << 20) /* bytes of headers held at once */

struct uentry {
    char kind;
    unsigned mode;
    uint64_t size;
    char *path;
    char *link;
    bool created;
};

static struct {
    struct uentry *e;
    uint32_t n;
    size_t held;
} g_table;

/* Reads exactly n bytes of stdin. Returns 0, or an exit status (printed). */
static int read_exact(void *buf, size_t n, const char *what)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = read(0, p, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return fail("io", "", "reading the entry stream (%s) failed: %s", what, strerror(errno));
        }
        if (r == 0)
            return fail("bad_stream", "", "the entry stream ends inside %s; send the whole stream", what);
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static uint64_t be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

static bool rel_path_ok(const char *p, size_t len)
{
    if (len == 0 || len > FO_PATH_MAX || p[0] == '/' || p[len - 1] == '/' || memchr(p, '\0', len) != NULL)
        return false;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && p[i] != '/')
            continue;
        size_t n = i - start;
        if (n == 0 || n > FO_NAME_MAX || (n == 1 && p[start] == '.') || (n == 2 && p[start] == '.' && p[start + 1] == '.'))
            return false;
        start = i + 1;
    }
    return true;
}

/* A length-prefixed string (u16), held in a new NUL-terminated allocation counted against the table's cap. */
static int read_string(char **out, const char *what)
{
    uint8_t b[2];
    int rc = read_exact(b, 2, what);
    if (rc != 0)
        return rc;
    size_t len = (size_t)be(b, 2);
    if (len == 0 || len > FO_PATH_MAX)
        return fail("bad_stream", "", "%s is empty or longer than %d bytes", what, FO_PATH_MAX);
    if (len + 1 > FO_UNPACK_TABLE_MAX - g_table.held)
        return fail("too_large", "", "the entry stream's headers exceed %u bytes; upload fewer files at once",
                    FO_UNPACK_TABLE_MAX);
    char *s = malloc(len + 1);
    if (s == NULL)
        return fail("io", "", "out of memory reading %s", what);
    g_table.held += len + 1;
    *out = s;
    rc = read_exact(s, len, what);
    if (rc != 0)
        return rc;
    s[len] = '\0';
    if (memchr(s, '\0', len) != NULL)
        return fail("bad_stream", "", "%s holds a NUL byte", what);
    return 0;
}

static int read_table(void)
{
    uint8_t head[12];
    int rc = read_exact(head, sizeof(head), "its header");
    if (rc != 0)
        return rc;
    if (memcmp(head, FO_UNPACK_MAGIC, 8) != 0)
        return fail("bad_stream", "", "stdin is not an entry stream (it starts without %s)", "XENTRY1");
    uint64_t count = be(head + 8, 4);
    if (count > FO_UNPACK_MAX_ENTRIES)
        return fail("too_large", "", "the entry stream has %llu entries, more than %u", (unsigned long long)count,
                    FO_UNPACK_MAX_ENTRIES);
    /* The table grows as headers actually arrive: a 12-byte stream claiming a million entries costs nothing. */
    uint32_t cap = 0;
    for (uint32_t i = 0; i < (uint32_t)count; i++) {
        uint8_t b[3];
        rc = read_exact(b, 3, "an entry's header");
        if (rc != 0)
            return rc;
        if (i == cap) {
            uint32_t grown = cap == 0 ? 64 : (cap > (uint32_t)count / 2 ? (uint32_t)count : 2 * cap);
            struct uentry *e = realloc(g_table.e, (size_t)grown * sizeof(struct uentry));
            if (e == NULL)
                return fail("io", "", "out of memory for %u entries", grown);
            memset(e + cap, 0, (size_t)(grown - cap) * sizeof(struct uentry));
            g_table.e = e;
            cap = grown;
        }
        struct uentry *u = &g_table.e[i];
        g_table.n = i + 1;
        u->kind = (char)b[0];
        u->mode = (unsigned)be(b + 1, 2);
        if ((u->kind != 'd' && u->kind != 'f' && u->kind != 'l') || u->mode > 0777)
            return fail("bad_stream", "", "entry %u has kind 0x%02x and mode %o; want d, f or l and <= 0777", i,
                        (unsigned)b[0], u->mode);
        rc = read_string(&u->path, "an entry's path");
        if (rc != 0)
            return rc;
        if (!rel_path_ok(u->path, strlen(u->path)))
            return fail("bad_path", u->path, "entry path %s is not a normalised relative path", u->path);
        if (u->kind == 'l') {
            rc = read_string(&u->link, "a symlink's text");
            if (rc != 0)
                return rc;
        } else if (u->kind == 'f') {
            uint8_t sz[8];
            rc = read_exact(sz, 8, "a file's size");
            if (rc != 0)
                return rc;
            u->size = be(sz, 8);
            if (u->size > (1ull << 62))
                return fail("bad_stream", u->path, "entry %s has an impossible size", u->path);
        }
    }
    return 0;
}

static void free_table(void)
{
    for (uint32_t i = 0; i < g_table.n; i++) {
        free(g_table.e[i].path);
        free(g_table.e[i].link);
    }
    free(g_table.e);
    memset(&g_table, 0, sizeof(g_table));
}

enum walk_end { WALK_OK, WALK_MISSING };

/* Opens the folder holding `rel` (relative to base) without following any symlink; with `create`, missing folders
 * are made (0755 minus the umask). *dirfd_out is an O_PATH descriptor; *name_at is the last component of rel.
 * Without `create`, a missing folder ends the walk with WALK_MISSING (*dirfd_out -1). Returns 0 or an exit status. */
static int walk_rel(int base, const char *rel, bool create, int *dirfd_out, const char **name_at, enum walk_end *end)
{
    char comp[FO_NAME_MAX + 1];
    char prefix[FO_PATH_MAX + 1];
    *dirfd_out = -1;
    *end = WALK_OK;
    int fd = dup(base);
    if (fd < 0)
        return fail_errno(errno, rel, "duplicating a descriptor for");
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        if (slash == NULL) {
            *dirfd_out = fd;
            *name_at = p;
            return 0;
        }
        size_t n = (size_t)(slash - p);
        memcpy(comp, p, n);
        comp[n] = '\0';
        memcpy(prefix, rel, (size_t)(slash - rel));
        prefix[slash - rel] = '\0';
        int next = openat(fd, comp, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        if (next < 0 && errno == ENOENT) {
            if (!create) {
                close(fd);
                *end = WALK_MISSING;
                return 0;
            }
            if (mkdirat(fd, comp, 0755) != 0 && errno != EEXIST) {
                int e = errno;
                close(fd);
                return fail_errno(e, prefix, "creating folder");
            }
            next = openat(fd, comp, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        }
        if (next < 0) {
            int e = errno;
            struct stat st;
            bool link = fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
            close(fd);
            if (link)
                return fail_kind("symlink", prefix, "symlink",
                                 "%s is a symbolic link; an upload never writes through one (it would write %s "
                                 "somewhere the gate did not judge): remove the link or upload to the folder it "
                                 "points at",
                                 prefix, rel);
            if (e == ENOTDIR || e == ELOOP)
                return fail("not_directory", prefix, "%s is not a folder, so %s cannot be written", prefix, rel);
            return fail_errno(e, prefix, "opening folder");
        }
        close(fd);
        fd = next;
        p = slash + 1;
    }
}

/* Before anything is written: every entry can be written as judged on the disk as it is now. */
static int unpack_check(int base)
{
    for (uint32_t i = 0; i < g_table.n; i++) {
        const struct uentry *u = &g_table.e[i];
        int dirfd;
        const char *name;
        enum walk_end end;
        int rc = walk_rel(base, u->path, false, &dirfd, &name, &end);
        if (rc != 0)
            return rc;
        if (end == WALK_MISSING)
            continue;
        struct stat st;
        int r = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW);
        int e = errno;
        close(dirfd);
        if (r != 0) {
            if (e == ENOENT)
                continue;
            return fail_errno(e, u->path, "looking at");
        }
        if (u->kind == 'd' && !S_ISDIR(st.st_mode))
            return fail_kind(S_ISLNK(st.st_mode) ? "symlink" : "not_directory", u->path, kind_of(st.st_mode),
                             "%s exists and is a %s, not a folder; an upload never replaces or follows it: remove "
                             "it first",
                             u->path, kind_of(st.st_mode));
        if (u->kind != 'd' && S_ISDIR(st.st_mode))
            return fail_kind("not_regular", u->path, "directory",
                             "%s is a folder; the upload holds a %s there: remove the folder first", u->path,
                             u->kind == 'f' ? "file" : "symlink");
    }
    return 0;
}

/* Copies exactly `size` bytes of stdin into fd. */
static int copy_exact(int fd, uint64_t size, const char *path)
{
    static uint8_t chunk[FO_CHUNK];
    while (size > 0) {
        size_t want = size < sizeof(chunk) ? (size_t)size : sizeof(chunk);
        int rc = read_exact(chunk, want, "a file's content");
        if (rc != 0)
            return rc;
        int e = 0;
        if (!write_all(fd, chunk, want, &e))
            return fail_errno(e, path, "writing");
        size -= want;
    }
    return 0;
}

static int unpack_one(int base, struct uentry *u, mode_t um, uint64_t *bytes)
{
    int dirfd;
    const char *name;
    enum walk_end end;
    int rc = walk_rel(base, u->path, true, &dirfd, &name, &end);
    if (rc != 0)
        return rc;
    if (u->kind == 'd') {
        if (mkdirat(dirfd, name, 0700) == 0) {
            u->created = true;
        } else {
            int e = errno;
            struct stat st;
            if (e != EEXIST || fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
                close(dirfd);
                return e == EEXIST ? fail("not_directory", u->path, "%s is no longer a folder", u->path)
                                   : fail_errno(e, u->path, "creating folder");
            }
        }
        close(dirfd);
        return 0;
    }
    rc = 0;
    int fd = -1;
    if (u->kind == 'f') {
        rc = create_staging(dirfd, name, u->path, &fd);
        if (rc == 0)
            rc = copy_exact(fd, u->size, u->path);
        if (rc == 0 && fchmod(fd, (mode_t)u->mode & ~um) != 0)
            rc = fail_errno(errno, u->path, "setting the mode of");
        if (fd >= 0 && close(fd) != 0 && rc == 0)
            rc = fail_errno(errno, u->path, "closing");
        *bytes += u->size;
    } else {
        for (int i = 0; rc == 0; i++) {
            rc = stage_name(name, u->path);
            if (rc != 0)
                break;
            if (symlinkat(u->link, dirfd, g_stage_name) == 0) {
                g_stage_dirfd = dirfd;
                break;
            }
            if (errno != EEXIST || i + 1 == FO_STAGING_TRIES)
                rc = fail_errno(errno, u->path, "creating the symlink");
        }
    }
    if (rc == 0 && renameat(dirfd, g_stage_name, dirfd, name) != 0)
        rc = fail_errno(errno, u->path, "renaming the staged entry to");
    if (rc != 0)
        stage_unlink(dirfd);
    stage_forget();
    close(dirfd);
    return rc;
}

/* Folders made here get their mode last (a 0555 folder must still take its files), deepest first. */
static int unpack_modes(int base, mode_t um)
{
    for (uint32_t k = g_table.n; k > 0; k--) {
        const struct uentry *u = &g_table.e[k - 1];
        if (u->kind != 'd' || !u->created)
            continue;
        int dirfd;
        const char *name;
        enum walk_end end;
        int rc = walk_rel(base, u->path, false, &dirfd, &name, &end);
        if (rc != 0)
            return rc;
        if (end == WALK_MISSING)
            return fail("not_found", u->path, "%s vanished while the upload was written", u->path);
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(dirfd);
        if (fd < 0)
            return fail_errno(e, u->path, "opening folder");
        rc = fchmod(fd, (mode_t)u->mode & ~um) != 0 ? fail_errno(errno, u->path, "setting the mode of") : 0;
        close(fd);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Opens folder DEST (absolute, or relative to the working folder), made if missing, following no symlink. */
static int open_dest(const char *dest, char *abs, int *fd_out)
{
    char cwd[FO_PATH_MAX + 1];
    char joined[2 * FO_PATH_MAX + 2];
    if (dest[0] == '\0' || strnlen(dest, FO_PATH_MAX + 1) > FO_PATH_MAX)
        return fail("bad_path", "", "the destination is empty or longer than %d bytes", FO_PATH_MAX);
    if (dest[0] == '/') {
        snprintf(joined, sizeof(joined), "%s", dest);
    } else {
        if (getcwd(cwd, sizeof(cwd)) == NULL)
            return fail_errno(errno, ".", "finding the working folder");
        snprintf(joined, sizeof(joined), "%s/%s", cwd, dest);
    }
    /* lexical normalisation is exact here: no component may be a symlink, so '..' is its parent */
    size_t used = 0;
    abs[0] = '\0';
    for (char *save = NULL, *c = strtok_r(joined, "/", &save); c != NULL; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") == 0) {
            char *cut = strrchr(abs, '/');
            used = cut != NULL ? (size_t)(cut - abs) : 0;
            abs[used] = '\0';
            continue;
        }
        size_t n = strlen(c);
        if (used + 1 + n > FO_PATH_MAX)
            return fail("bad_path", "", "the destination is longer than %d bytes", FO_PATH_MAX);
        abs[used++] = '/';
        memcpy(abs + used, c, n + 1);
        used += n;
    }
    if (used == 0) {
        abs[0] = '/';
        abs[1] = '\0';
        *fd_out = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        return *fd_out < 0 ? fail_errno(errno, "/", "opening") : 0;
    }
    struct walk w;
    g_make_parents = true;
    int rc = walk_parents(abs, &w);
    if (rc != 0)
        return rc;
    if (mkdirat(w.dirfd, w.name, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        close(w.dirfd);
        return fail_errno(e, abs, "creating folder");
    }
    int fd = openat(w.dirfd, w.name, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
    int e = errno;
    struct stat st;
    bool link = fd < 0 && fstatat(w.dirfd, w.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
    close(w.dirfd);
    if (link)
        return fail_kind("symlink", abs, "symlink",
                         "refusing to unpack into %s: it is a symbolic link (name the folder it points at)", abs);
    if (fd < 0)
        return e == ENOTDIR ? fail("not_directory", abs, "%s is not a folder", abs) : fail_errno(e, abs, "opening");
    *fd_out = fd;
    return 0;
}

static int cmd_unpack(int argc, char **argv)
{
    g_echo_stderr = true;
    if (argc >= 1 && strcmp(argv[0], "--") == 0) {
        argc--;
        argv++;
    }
    if (argc != 1)
        return fail("usage", "", "fs-unpack takes one DEST (the folder to unpack into) and the stream on stdin");
    if (install_cleanup_handlers() != 0)
        return fail("io", "", "installing signal handlers failed: %s", strerror(errno));
    static char abs[FO_PATH_MAX + 1];
    int base = -1;
    int rc = read_table();
    if (rc == 0)
        rc = open_dest(argv[0], abs, &base);
    if (rc == 0)
        rc = unpack_check(base);
    mode_t um = umask(0);
    umask(um);
    uint64_t files = 0, bytes = 0;
    for (uint32_t i = 0; rc == 0 && i < g_table.n; i++) {
        rc = unpack_one(base, &g_table.e[i], um, &bytes);
        if (rc != 0)
            break;
        files += g_table.e[i].kind == 'f';
    }
    if (rc == 0)
        rc = unpack_modes(base, um);
    if (rc == 0) {
        uint8_t extra;
        ssize_t r;
        do
            r = read(0, &extra, 1);
        while (r < 0 && errno == EINTR);
        if (r != 0)
            rc = fail("bad_stream", "", "the entry stream has bytes after its last entry");
    }
    uint32_t n = g_table.n;
    free_table();
    if (base >= 0)
        close(base);
    if (rc != 0)
        return rc;
    out_lit("{\"ok\":true,");
    out_key("path");
    out_str(abs);
    out_lit(",");
    out_key("entries");
    out_u64(n);
    out_lit(",");
    out_key("files");
    out_u64(files);
    out_lit(",");
    out_key("bytes");
    out_u64(bytes);
    out_lit("}");
    return out_flush(EXIT_OK, NULL, 0);
}

/* ---------------------------------------------------------------- dispatch */

int fileops_main(int argc, char **argv)
{
    if (argc < 1 || argv == NULL || argv[0] == NULL)
        return fail("usage", "", "no subcommand");
    /* argv[0] is the program unless it is the subcommand itself */
    if (strncmp(argv[0], "fs-", 3) != 0) {
        argc--;
        argv++;
    }
    if (argc < 1 || argv[0] == NULL)
        return fail("usage", "", "no subcommand: use fs-stat, fs-read or fs-write");
    const char *sub = argv[0];
    if (strcmp(sub, "fs-stat") == 0)
        return cmd_stat(argc - 1, argv + 1);
    if (strcmp(sub, "fs-read") == 0)
        return cmd_read(argc - 1, argv + 1);
    if (strcmp(sub, "fs-write") == 0)
        return cmd_write(argc - 1, argv + 1);
    if (strcmp(sub, "fs-unpack") == 0)
        return cmd_unpack(argc - 1, argv + 1);
    return fail("usage", "", "unknown subcommand %.32s: use fs-stat, fs-read, fs-write or fs-unpack", sub);
}

#ifdef FILEOPS_STANDALONE
int main(int argc, char **argv) { return fileops_main(argc, argv); }
#endif
