/* File operations of the in-container agent: fs-stat, fs-read, fs-write.
 *
 * The host runs them as `/.executor/agent fs-SUBCOMMAND ARGS...` (an explicit argv, never a shell), as the
 * session user, with any file content on stdin. Each prints exactly one JSON object on stdout (fs-read: one
 * JSON header line followed by raw bytes) and exits 0 on success, 1 on a reported error, 2 on a usage error.
 * The shapes are documented in fileops.c and in PROTOCOL.md ("File operations").
 */
#ifndef EXECUTOR_AGENT_FILEOPS_H
#define EXECUTOR_AGENT_FILEOPS_H

/* Run one file operation and return the process exit status.
 *
 * `argv` is the argv the agent's main received: argv[1] is the subcommand ("fs-stat", "fs-read",
 * "fs-write"). For convenience argv[0] may also be the subcommand itself (then the arguments start at
 * argv[1]). Writes its JSON result to fd 1; reads content from fd 0 (fs-write only).
 */
int fileops_main(int argc, char **argv);

#endif
