/* A standalone mutation fuzzer for fs-unpack's entry-stream parser and writer (fileops.c), built with ASan + UBSan.
 *
 *   fuzz_unpack ITERATIONS SCRATCH [SEED]
 *
 * It includes fileops.c itself, so the static functions under test are the ones the agent runs. Each input is a
 * mutated valid entry stream (bit flips, byte overwrites, inserts, deletes, 2- 4- and 8-byte length rewrites,
 * truncations, splices), put in a memfd that becomes stdin. The parser (read_table) runs on every input; an input
 * it accepts is then written for real under a fresh folder in SCRATCH (open_dest, unpack_check, unpack_one,
 * unpack_modes), and afterwards no path may exist outside that folder and no descriptor may be left open.
 * Exit 0 when every iteration ran; a sanitizer aborts otherwise, and a broken invariant exits 3 saying which.
 */
#include "fileops.c"

#include <dirent.h>
#include <ftw.h>
#include <sys/mman.h>

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* xorshift64*: deterministic per seed, so a failure replays. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

#define MAXIN 8192

static size_t put_be(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
    return n;
}

static size_t add_entry(uint8_t *p, char kind, unsigned mode, const char *path, const char *link, uint64_t size)
{
    size_t n = 0;
    p[n++] = (uint8_t)kind;
    n += put_be(p + n, mode, 2);
    n += put_be(p + n, strlen(path), 2);
    memcpy(p + n, path, strlen(path));
    n += strlen(path);
    if (kind == 'l') {
        n += put_be(p + n, strlen(link), 2);
        memcpy(p + n, link, strlen(link));
        n += strlen(link);
    } else if (kind == 'f') {
        n += put_be(p + n, size, 8);
    }
    return n;
}

static size_t seed_input(uint8_t *out, int which)
{
    size_t n = 0;
    memcpy(out, FO_UNPACK_MAGIC, 8);
    n = 8;
    switch (which % 3) {
    case 0:
        n += put_be(out + n, 4, 4);
        n += add_entry(out + n, 'd', 0755, "a", NULL, 0);
        n += add_entry(out + n, 'd', 0500, "a/b", NULL, 0);
        n += add_entry(out + n, 'f', 0644, "a/b/f.txt", NULL, 5);
        n += add_entry(out + n, 'l', 0777, "a/ln", "b/f.txt", 0);
        memcpy(out + n, "hello", 5);
        return n + 5;
    case 1:
        n += put_be(out + n, 2, 4);
        n += add_entry(out + n, 'f', 0600, "x", NULL, 3);
        n += add_entry(out + n, 'f', 0755, "y/z", NULL, 0);
        memcpy(out + n, "abc", 3);
        return n + 3;
    default:
        n += put_be(out + n, 3, 4);
        n += add_entry(out + n, 'l', 0777, "up", "../../..", 0);
        n += add_entry(out + n, 'l', 0777, "abs", "/etc", 0);
        n += add_entry(out + n, 'f', 0644, "up2/../q", NULL, 1);
        out[n++] = 'q';
        return n;
    }
}

static size_t mutate(uint8_t *buf, size_t len)
{
    int rounds = 1 + (int)(rnd() % 4);
    for (int r = 0; r < rounds; r++) {
        switch (rnd() % 8) {
        case 0: /* bit flip */
            if (len)
                buf[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
            break;
        case 1: /* byte overwrite, often with a byte paths care about */
            if (len) {
                static const uint8_t vals[] = {0, '/', '.', 'd', 'f', 'l', 0xff};
                buf[rnd() % len] = (rnd() % 2) ? vals[rnd() % sizeof vals] : (uint8_t)rnd();
            }
            break;
        case 2: /* insert */
            if (len < MAXIN) {
                size_t at = len ? rnd() % (len + 1) : 0;
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = (uint8_t)rnd();
                len++;
            }
            break;
        case 3: /* delete */
            if (len) {
                size_t at = rnd() % len;
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
            }
            break;
        case 4: { /* rewrite a count, length or size field with an interesting value */
            static const uint64_t vals[] = {0, 1, 2, 3, 255, 4095, 4096, 65535, 1000000, 1000001, 0xffffffffu,
                                            (1ull << 62) + 1, ~0ull};
            static const size_t widths[] = {2, 4, 8};
            size_t w = widths[rnd() % 3];
            if (len >= w) {
                size_t at = rnd() % (len - w + 1);
                put_be(buf + at, vals[rnd() % (sizeof vals / sizeof vals[0])], w);
            }
            break;
        }
        case 5: /* truncate */
            if (len)
                len = rnd() % len;
            break;
        case 6: /* append junk */
            if (len < MAXIN)
                buf[len++] = (uint8_t)rnd();
            break;
        default: { /* splice another seed's tail in */
            uint8_t other[MAXIN];
            size_t on = seed_input(other, (int)(rnd() % 3));
            if (on > 12 && len + on - 12 <= MAXIN) {
                memcpy(buf + len, other + 12, on - 12);
                len += on - 12;
            }
            break;
        }
        }
    }
    return len;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP || flag == FTW_D)
        return rmdir(path) == 0 ? 0 : -1;
    return unlink(path) == 0 ? 0 : -1;
}

static int chmod_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag == FTW_D && S_ISDIR(st->st_mode) && chmod(path, 0700) != 0)
        return -1;
    return 0;
}

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_unpack: %s: %s\n", what, detail);
    exit(3);
}

/* Runs the steps of cmd_unpack (without its stderr echo or signal handlers) against stdin. */
static bool unpack_into(const char *dest, uint64_t *written, bool *parsed)
{
    static char abs[FO_PATH_MAX + 1];
    int base = -1;
    int rc = read_table();
    *parsed = rc == 0;
    if (rc == 0)
        rc = open_dest(dest, abs, &base);
    if (rc == 0)
        rc = unpack_check(base);
    mode_t um = umask(0);
    umask(um);
    uint64_t bytes = 0;
    for (uint32_t i = 0; rc == 0 && i < g_table.n; i++)
        rc = unpack_one(base, &g_table.e[i], um, &bytes);
    if (rc == 0)
        rc = unpack_modes(base, um);
    free_table();
    if (base >= 0 && close(base) != 0)
        die("close", strerror(errno));
    *written = bytes;
    return rc == 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fuzz_unpack ITERATIONS SCRATCH [SEED]\n");
        return 2;
    }
    unsigned long long iters = strtoull(argv[1], NULL, 10);
    const char *scratch = argv[2];
    rng_state = argc > 3 ? strtoull(argv[3], NULL, 10) : 0x9e3779b97f4a7c15ULL;
    if (rng_state == 0)
        rng_state = 1;
    /* fail() prints its JSON answer on stdout for every refusal: keep the report readable */
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, 1) != 1 || close(null) != 0)
        die("/dev/null", strerror(errno));
    char root[FO_PATH_MAX + 1], dest[FO_PATH_MAX + 1];
    if (snprintf(root, sizeof root, "%s/round", scratch) >= (int)sizeof root ||
        snprintf(dest, sizeof dest, "%s/round/dest", scratch) >= (int)sizeof dest)
        die("scratch", "path too long");
    int fd_mark = -1;
    unsigned long long parsed = 0, written = 0;
    static uint8_t work[MAXIN + 64];
    for (unsigned long long i = 0; i < iters; i++) {
        size_t len = mutate(work, seed_input(work, (int)(rnd() % 3)));
        int mfd = memfd_create("stream", MFD_CLOEXEC);
        if (mfd < 0)
            die("memfd_create", strerror(errno));
        int e = 0;
        if (!write_all(mfd, work, len, &e) || lseek(mfd, 0, SEEK_SET) != 0 || dup2(mfd, 0) != 0 || close(mfd) != 0)
            die("stdin", strerror(e != 0 ? e : errno));
        if (mkdir(root, 0755) != 0)
            die("mkdir round", strerror(errno));
        g_out.len = 0;
        g_out.overflow = false;
        uint64_t bytes = 0;
        bool was_parsed = false;
        bool ok = unpack_into(dest, &bytes, &was_parsed);
        parsed += was_parsed;
        written += ok;
        /* nothing may appear beside dest: no entry escaped it */
        DIR *d = opendir(root);
        if (d == NULL)
            die("opendir", strerror(errno));
        for (struct dirent *ent; (ent = readdir(d)) != NULL;)
            if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0 && strcmp(ent->d_name, "dest") != 0)
                die("an entry escaped the destination", ent->d_name);
        if (closedir(d) != 0)
            die("closedir", strerror(errno));
        if (nftw(root, chmod_one, 16, FTW_PHYS) != 0 || nftw(root, rm_one, 16, FTW_PHYS | FTW_DEPTH) != 0)
            die("cleaning the scratch folder", strerror(errno));
        /* the lowest free descriptor never climbs: nothing leaked */
        int probe = dup(0);
        if (probe < 0 || close(probe) != 0)
            die("dup", strerror(errno));
        if (fd_mark < 0)
            fd_mark = probe;
        else if (probe != fd_mark)
            die("a descriptor leaked", "the lowest free descriptor moved");
    }
    fprintf(stderr, "iterations=%llu parsed=%llu written=%llu\n", iters, parsed, written);
    return 0;
}
