/* Wire format of the agent protocol (see PROTOCOL.md): frames, TLV fields, request decoding.
 *
 * Pure functions over byte buffers: no IO, no globals, so the fuzz driver (fuzz_frames.c) exercises exactly
 * the code the agent runs on untrusted input.
 */
#ifndef EXECUTOR_AGENT_FRAME_H
#define EXECUTOR_AGENT_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION 1
#define FRAME_LEN_BYTES 4
#define FRAME_HDR 9       /* u32 length + u8 type + u32 id */
#define FRAME_MIN_LEN 5   /* the length counts type + id + payload */
#define FRAME_MIN_MAX 4096
#define FRAME_MAX_MAX (16u * 1024u * 1024u)
#define TLV_HDR 5         /* u8 tag + u32 length */
#define REQ_MAX_LIST 4096 /* argv and env entries per request */

/* Host -> agent. */
enum {
    T_HELLO = 0x01,
    T_RUN = 0x02,
    T_STDIN = 0x03,
    T_CANCEL = 0x04,
    T_START = 0x05,
    T_READ = 0x06,
    T_STOP = 0x07,
    T_LIST = 0x08,
    T_SWEEP = 0x09,
    T_INFO = 0x0A,
    T_PING = 0x0B,
};

/* Agent -> host. */
enum {
    T_HELLO_OK = 0x81,
    T_STARTED = 0x82,
    T_OUT = 0x83,
    T_ERR = 0x84,
    T_RESULT = 0x85,
    T_ERROR = 0x86,
    T_TASK = 0x87,
    T_CHUNK = 0x88,
    T_TASKS = 0x89,
    T_PROCS = 0x8A,
    T_INFO_OK = 0x8B,
    T_PONG = 0x8C,
};

/* TLV tags. Integers are 8-byte big-endian signed; strings are raw bytes without NUL. */
enum {
    G_CMD = 1,
    G_ARGV = 2,
    G_CWD = 3,
    G_ENV = 4,
    G_STDIN = 5,       /* int 1: STDIN frames follow (RUN) */
    G_TIMEOUT_MS = 6,
    G_GRACE_MS = 7,
    G_DRAIN_MS = 8,
    G_KILL_ORPHANS = 9,
    G_VERSION = 10,
    G_MAX_FRAME = 11,
    G_TASK = 12,
    G_STREAM = 13,
    G_OFFSET = 14,
    G_MAX = 15,
    G_STDIN_DATA = 16, /* START: the whole stdin inline */
    G_CAUSE = 20,
    G_EXIT_CODE = 21,
    G_SIGNAL = 22,
    G_DURATION_US = 23,
    G_CPU_US = 24,
    G_MAXRSS_KB = 25,
    G_BYTES_OUT = 26,
    G_BYTES_ERR = 27,
    G_ORPHAN_LEFT = 28,   /* 8-byte pid + cmdline */
    G_ORPHAN_KILLED = 29, /* 8-byte pid + cmdline */
    G_DRAIN_CUT = 30,
    G_SHELL = 31,
    G_PIDS_MAX_HITS = 32,
    G_SHMEM_BYTES = 33,
    G_ORPHAN_LEFT_TOTAL = 34,   /* how many were left, also past the ones listed */
    G_ORPHAN_KILLED_TOTAL = 35, /* how many were killed, also past the ones listed */
    G_DATA = 40,
    G_START = 41,
    G_END = 42,
    G_RUNNING = 43,
    G_TASK_REC = 44,   /* nested TLVs */
    G_AGENT_VERSION = 50,
    G_HAS_BASH = 51,
    G_UID = 52,
    G_GID = 53,
    G_PID = 54,
    G_MSG = 55,
    G_CODE = 56,
    G_PROC = 57,       /* 8-byte pid + cmdline */
    G_TAG = 58,
    G_IS_INIT = 59,
};

struct frame_view {
    uint8_t type;
    uint32_t id;
    const uint8_t *payload;
    uint32_t len;
};

/* Parse one frame from buf[0..len). Returns 1 and fills *out, *consumed when a whole frame is there; 0 when more
 * bytes are needed; -1 when the length is out of [FRAME_MIN_LEN, max_frame] (the connection must be closed). */
int frame_parse(const uint8_t *buf, size_t len, uint32_t max_frame, struct frame_view *out, size_t *consumed);

/* 1 when type is a host->agent frame type this agent knows. */
int frame_type_known(uint8_t type);

struct tlv_iter {
    const uint8_t *p;
    size_t left;
};

/* Next field: 1 ok, 0 end, -1 malformed (a length past the end). */
int tlv_next(struct tlv_iter *it, uint8_t *tag, const uint8_t **val, uint32_t *vlen);
/* Decode an 8-byte integer field; -1 when the length is not 8. */
int tlv_int(const uint8_t *val, uint32_t vlen, int64_t *out);

void put_u32(uint8_t *p, uint32_t v);
uint32_t get_u32(const uint8_t *p);
void put_i64(uint8_t *p, int64_t v);

/* A decoded RUN or START request. Strings are NUL-terminated heap copies. */
struct run_req {
    char *cmd;            /* bash -c CMD; NULL when argv is given */
    char **argv;          /* NULL-terminated; argv[0] absolute */
    size_t argc;
    char *cwd;            /* NULL: the workspace */
    char **env;           /* NAME=VALUE, NULL-terminated */
    size_t envc;
    int has_stdin;        /* RUN: STDIN frames follow */
    uint8_t *stdin_data;  /* START: inline stdin (may be empty) */
    size_t stdin_len;
    int stdin_inline;
    int64_t timeout_ms;   /* 0: none */
    int64_t grace_ms;
    int64_t drain_ms;
    int kill_orphans;
};

/* Decode a RUN/START payload. Returns 0, or -1 with a message in err (the request is refused, the connection kept).
 * Every string is checked for NUL bytes, lists are capped at REQ_MAX_LIST, integers are range-checked. */
int run_req_parse(const uint8_t *payload, uint32_t len, struct run_req *req, char *err, size_t errlen);
void run_req_free(struct run_req *req);

#endif
