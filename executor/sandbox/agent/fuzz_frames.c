/* A standalone mutation fuzzer for the agent's frame parser (frame.c), built with ASan + UBSan.
 *
 *   fuzz_frames ITERATIONS [SEED]
 *
 * No libFuzzer here (gcc only), so it mutates a corpus of valid frames itself (bit flips, byte overwrites,
 * inserts, deletes, length-field rewrites, splices) and feeds each input, copied into an exact-size heap
 * buffer so any overread trips ASan, through the same path the agent uses: frame_parse in a loop, then
 * tlv_next over each payload, then run_req_parse. Exit 0 when every iteration ran; sanitizers abort otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* xorshift64*: deterministic per seed, so a failure replays. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

static size_t add_tlv(uint8_t *p, uint8_t tag, const void *v, uint32_t n)
{
    p[0] = tag;
    put_u32(p + 1, n);
    memcpy(p + TLV_HDR, v, n);
    return TLV_HDR + n;
}

static size_t add_int(uint8_t *p, uint8_t tag, int64_t v)
{
    uint8_t b[8];
    put_i64(b, v);
    return add_tlv(p, tag, b, 8);
}

static size_t make_frame(uint8_t *out, uint8_t type, uint32_t id, const uint8_t *payload, size_t n)
{
    put_u32(out, (uint32_t)(n + FRAME_MIN_LEN));
    out[4] = type;
    put_u32(out + 5, id);
    memcpy(out + FRAME_HDR, payload, n);
    return FRAME_HDR + n;
}

#define MAXIN 8192

static size_t seed_input(uint8_t *out, int which)
{
    uint8_t pl[2048];
    size_t n = 0;
    switch (which % 4) {
    case 0:
        n += add_int(pl + n, G_VERSION, PROTO_VERSION);
        n += add_int(pl + n, G_MAX_FRAME, 1 << 20);
        return make_frame(out, T_HELLO, 0, pl, n);
    case 1:
        n += add_tlv(pl + n, G_CMD, "echo hi; exit 3", 15);
        n += add_tlv(pl + n, G_CWD, "/workspace", 10);
        n += add_tlv(pl + n, G_ENV, "A=1", 3);
        n += add_int(pl + n, G_TIMEOUT_MS, 1000);
        n += add_int(pl + n, G_GRACE_MS, 100);
        n += add_int(pl + n, G_STDIN, 1);
        return make_frame(out, T_RUN, 7, pl, n);
    case 2:
        n += add_tlv(pl + n, G_ARGV, "/bin/echo", 9);
        n += add_tlv(pl + n, G_ARGV, "x", 1);
        n += add_tlv(pl + n, G_STDIN_DATA, "abc", 3);
        n += add_int(pl + n, G_KILL_ORPHANS, 0);
        return make_frame(out, T_START, 9, pl, n);
    default: {
        size_t k = make_frame(out, T_PING, 1, (const uint8_t *)"ping", 4);
        n += add_tlv(pl + n, G_TASK, "t1", 2);
        n += add_int(pl + n, G_STREAM, 1);
        n += add_int(pl + n, G_OFFSET, 0);
        return k + make_frame(out + k, T_READ, 2, pl, n);
    }
    }
}

static size_t mutate(uint8_t *buf, size_t len)
{
    int rounds = 1 + (int)(rnd() % 6);
    for (int r = 0; r < rounds; r++) {
        switch (rnd() % 7) {
        case 0: /* bit flip */
            if (len)
                buf[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
            break;
        case 1: /* byte overwrite */
            if (len)
                buf[rnd() % len] = (uint8_t)rnd();
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
        case 4: /* rewrite a 4-byte length somewhere (frame or field) with an interesting value */
            if (len >= 4) {
                static const uint32_t vals[] = {0, 1, 4, 5, 6, 8, 0x7fffffff, 0xffffffff, 4096, 1u << 20, 1u << 24};
                size_t at = rnd() % (len - 3);
                put_u32(buf + at, vals[rnd() % (sizeof vals / sizeof vals[0])] + (uint32_t)(rnd() % 3) - 1);
            }
            break;
        case 5: /* truncate */
            if (len)
                len = rnd() % len;
            break;
        default: { /* splice another seed in */
            uint8_t other[MAXIN];
            size_t on = seed_input(other, (int)(rnd() % 4));
            if (len + on <= MAXIN) {
                memcpy(buf + len, other, on);
                len += on;
            }
            break;
        }
        }
    }
    return len;
}

static unsigned long long frames_seen, runs_parsed;

static void consume(const uint8_t *in, size_t len, uint32_t max_frame)
{
    size_t pos = 0;
    for (;;) {
        struct frame_view f;
        size_t used = 0;
        int rc = frame_parse(in + pos, len - pos, max_frame, &f, &used);
        if (rc <= 0)
            return;
        frames_seen++;
        struct tlv_iter it = {f.payload, f.len};
        uint8_t tag;
        const uint8_t *val;
        uint32_t vlen;
        int64_t iv;
        while (tlv_next(&it, &tag, &val, &vlen) == 1)
            (void)tlv_int(val, vlen, &iv);
        struct run_req req;
        char err[256];
        if (run_req_parse(f.payload, f.len, &req, err, sizeof err) == 0) {
            runs_parsed++;
            run_req_free(&req);
        }
        pos += used;
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_frames ITERATIONS [SEED]\n");
        return 2;
    }
    unsigned long long iters = strtoull(argv[1], NULL, 10);
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 0x9e3779b97f4a7c15ULL;
    if (rng_state == 0)
        rng_state = 1;
    static uint8_t work[MAXIN + 4096];
    for (unsigned long long i = 0; i < iters; i++) {
        size_t len = seed_input(work, (int)(rnd() % 4));
        len = mutate(work, len);
        uint8_t *exact = malloc(len ? len : 1);
        if (exact == NULL)
            return 1;
        memcpy(exact, work, len);
        uint32_t max_frame = (rnd() % 2) ? FRAME_MIN_MAX : (uint32_t)(1u << 20);
        consume(exact, len, max_frame);
        free(exact);
    }
    printf("iterations=%llu frames=%llu runs=%llu\n", iters, frames_seen, runs_parsed);
    return 0;
}
