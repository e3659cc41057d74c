/* Frame and TLV codec of the agent protocol; see frame.h and PROTOCOL.md. */
#include "frame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

uint32_t get_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

void put_i64(uint8_t *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)u;
        u >>= 8;
    }
}

int frame_parse(const uint8_t *buf, size_t len, uint32_t max_frame, struct frame_view *out, size_t *consumed)
{
    if (len < FRAME_LEN_BYTES)
        return 0;
    uint32_t flen = get_u32(buf);
    /* The length is checked before anything is sized from it. */
    if (flen < FRAME_MIN_LEN || flen > max_frame)
        return -1;
    if (len - FRAME_LEN_BYTES < flen)
        return 0;
    out->type = buf[4];
    out->id = get_u32(buf + 5);
    out->payload = buf + FRAME_HDR;
    out->len = flen - FRAME_MIN_LEN;
    *consumed = (size_t)flen + FRAME_LEN_BYTES;
    return 1;
}

int frame_type_known(uint8_t type)
{
    return type >= T_HELLO && type <= T_PING;
}

int tlv_next(struct tlv_iter *it, uint8_t *tag, const uint8_t **val, uint32_t *vlen)
{
    if (it->left == 0)
        return 0;
    if (it->left < TLV_HDR)
        return -1;
    uint32_t n = get_u32(it->p + 1);
    if ((size_t)n > it->left - TLV_HDR)
        return -1;
    *tag = it->p[0];
    *val = it->p + TLV_HDR;
    *vlen = n;
    it->p += TLV_HDR + (size_t)n;
    it->left -= TLV_HDR + (size_t)n;
    return 1;
}

int tlv_int(const uint8_t *val, uint32_t vlen, int64_t *out)
{
    if (vlen != 8)
        return -1;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = (u << 8) | val[i];
    *out = (int64_t)u;
    return 0;
}

static char *dup_str(const uint8_t *val, uint32_t vlen)
{
    if (memchr(val, 0, vlen) != NULL)
        return NULL;
    char *s = malloc((size_t)vlen + 1);
    if (s == NULL)
        return NULL;
    memcpy(s, val, vlen);
    s[vlen] = '\0';
    return s;
}

static int push(char ***list, size_t *n, char *s)
{
    if (*n >= REQ_MAX_LIST)
        return -1;
    char **grown = realloc(*list, (*n + 2) * sizeof **list);
    if (grown == NULL)
        return -1;
    *list = grown;
    grown[(*n)++] = s;
    grown[*n] = NULL;
    return 0;
}

#define FAIL(...)                                                                                                  \
    do {                                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                                        \
        run_req_free(req);                                                                                         \
        return -1;                                                                                                 \
    } while (0)

int run_req_parse(const uint8_t *payload, uint32_t len, struct run_req *req, char *err, size_t errlen)
{
    memset(req, 0, sizeof *req);
    req->grace_ms = 3000;
    req->drain_ms = 1000;
    req->kill_orphans = 1;
    struct tlv_iter it = {payload, len};
    uint8_t tag;
    const uint8_t *val;
    uint32_t vlen;
    int rc;
    while ((rc = tlv_next(&it, &tag, &val, &vlen)) == 1) {
        int64_t v = 0;
        char *s = NULL;
        switch (tag) {
        case G_CMD:
            if (req->cmd != NULL)
                FAIL("cmd given twice");
            if ((req->cmd = dup_str(val, vlen)) == NULL)
                FAIL("cmd contains a NUL byte (or out of memory)");
            break;
        case G_ARGV:
            if ((s = dup_str(val, vlen)) == NULL)
                FAIL("argv entry contains a NUL byte (or out of memory)");
            if (push(&req->argv, &req->argc, s) != 0) {
                free(s);
                FAIL("more than %d argv entries", REQ_MAX_LIST);
            }
            break;
        case G_CWD:
            if (req->cwd != NULL)
                FAIL("cwd given twice");
            if ((req->cwd = dup_str(val, vlen)) == NULL)
                FAIL("cwd contains a NUL byte (or out of memory)");
            if (req->cwd[0] != '/')
                FAIL("cwd must be absolute");
            break;
        case G_ENV:
            if ((s = dup_str(val, vlen)) == NULL)
                FAIL("env entry contains a NUL byte (or out of memory)");
            if (s[0] == '=' || strchr(s, '=') == NULL) {
                free(s);
                FAIL("env entry must be NAME=VALUE with a non-empty NAME");
            }
            if (push(&req->env, &req->envc, s) != 0) {
                free(s);
                FAIL("more than %d env entries", REQ_MAX_LIST);
            }
            break;
        case G_STDIN_DATA:
            if (req->stdin_inline)
                FAIL("stdin given twice");
            req->stdin_inline = 1;
            req->stdin_data = malloc(vlen ? vlen : 1);
            if (req->stdin_data == NULL)
                FAIL("out of memory");
            memcpy(req->stdin_data, val, vlen);
            req->stdin_len = vlen;
            break;
        case G_STDIN:
        case G_TIMEOUT_MS:
        case G_GRACE_MS:
        case G_DRAIN_MS:
        case G_KILL_ORPHANS:
            if (tlv_int(val, vlen, &v) != 0)
                FAIL("field %u must be an 8-byte integer", (unsigned)tag);
            /* One day is plenty for any of these; the bound keeps deadline arithmetic far from overflow. */
            if (v < 0 || v > 86400000LL * 31)
                FAIL("field %u out of range", (unsigned)tag);
            if (tag == G_STDIN)
                req->has_stdin = v != 0;
            else if (tag == G_TIMEOUT_MS)
                req->timeout_ms = v;
            else if (tag == G_GRACE_MS)
                req->grace_ms = v;
            else if (tag == G_DRAIN_MS)
                req->drain_ms = v;
            else
                req->kill_orphans = v != 0;
            break;
        default:
            FAIL("unknown field %u", (unsigned)tag);
        }
    }
    if (rc < 0)
        FAIL("truncated field");
    if ((req->cmd == NULL) == (req->argc == 0))
        FAIL("give exactly one of cmd and argv");
    if (req->argc > 0 && req->argv[0][0] != '/')
        FAIL("argv[0] must be an absolute path");
    return 0;
}

void run_req_free(struct run_req *req)
{
    free(req->cmd);
    free(req->cwd);
    for (size_t i = 0; i < req->argc; i++)
        free(req->argv[i]);
    free(req->argv);
    for (size_t i = 0; i < req->envc; i++)
        free(req->env[i]);
    free(req->env);
    free(req->stdin_data);
    memset(req, 0, sizeof *req);
}
