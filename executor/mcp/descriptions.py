"""Tool descriptions and argument types of the MCP tools: they teach the agent how to work with the executor,
recovery first.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = [
    "BASH_DOC",
    "INSTRUCTIONS",
    "READ_OUTPUT_DOC",
    "SEARCH_OUTPUT_DOC",
    "TASK_LIST_DOC",
    "TASK_READ_DOC",
    "TASK_START_DOC",
    "TASK_STOP_DOC",
    "WRITE_DOC",
    "ArtifactIdArg",
    "CommandArg",
    "CwdArg",
    "EnvArg",
    "StreamArg",
    "TaskIdArg",
]

INSTRUCTIONS = """\
Run shell commands and write files inside a sandboxed container session (no network unless the operator allows it).
Every command's full stdout and stderr are kept on the host as an artifact; results show a bounded view plus the
artifact id. To see output the view left out, page it with read_output or find lines with search_output. Do not
re-run a command to see its output again: re-running costs time, may give different output and may repeat side
effects. Long-running programs (servers, watchers, builds you want to poll) go in background tasks: task_start,
then task_read by byte offset. Some actions need a person's approval; if a result says an action is blocked,
ask the user, do not retry it in a different form."""

BASH_DOC = """\
Run one bash command (`bash -c`, no rc files) in this session's sandboxed container and wait for it.

Each call is a fresh bash process: files in the workspace persist for the session, but `cd`, exported variables
and shell functions do not carry over (pass `cwd` and `env` instead). stdin is empty unless you pass `stdin`.
The command runs under a deadline (`timeout_ms`, else the configured default); on timeout its whole process
group is killed and the output so far is kept.

The result text is a bounded, sanitized view: long output is cut, and the cut is marked. The complete stdout
and stderr are stored on the host in the artifact named in the result (`artifact_id`). To see more of it,
DO NOT run the command again: call read_output(artifact_id, stream="stdout"|"stderr", start_line, line_count)
to page lines, continue a very long line with start_byte_in_line, or call search_output(artifact_id, pattern)
to find the lines you need (then read_output around them). The structured result carries `outcome`
(completed, failed, timeout, cancelled, blocked, denied, error), `exit_code` (128+N when signal N ended it)
and `artifact_id`.

Some commands need approval: the user is asked to approve the exact command. If the result is `blocked`,
nobody could be asked: tell the user what you want to run and why, and let them decide; if it is `denied`,
do not retry the same action in another form. Commands that never finish on their own (servers, `tail -f`,
watchers) belong in task_start, not here."""

WRITE_DOC = """\
Write a whole file in this session's workspace (created, or replaced entirely) without going through the shell.

`path` is relative to the workspace (or absolute inside it). The write is checked against the file's current
state: it refuses symlinks on the path and non-regular targets, keeps the existing file's permissions, and
writes atomically. Writes outside the workspace or to sensitive paths may need the user's approval (they are
shown the diff) or be denied. Send text as `content`; for binary data set `encoding` to "base64". To append or
edit a small part, read the file first (bash `cat`), then write the whole new content."""

READ_OUTPUT_DOC = """\
Read lines from a stored output artifact: the complete stdout/stderr of an earlier bash call or background task
in this session, including everything the bounded view left out. Use this instead of re-running a command.

Give the `artifact_id` from the earlier result, the `stream` ("stdout" or "stderr"; default: the artifact's main
stream), `start_line` (1-based) and `line_count`. The result says which lines it covers and how many the stream
has, so you can continue with the next start_line. A line too long to show whole is cut and the cut says the
byte offset where it stopped: pass that as `start_byte_in_line` (with the same start_line) to continue inside
that line. Ids from other sessions or other clients are "not found"."""

SEARCH_OUTPUT_DOC = """\
Search a stored output artifact (the complete stdout/stderr of an earlier bash call or background task) for a
regular expression, and get the matching lines with their line numbers. Use this to find errors, test names or
values in long output instead of re-running the command or paging through all of it; then call read_output with
a start_line just before a match to see its context. `limit` caps the matches returned; continue after the last
match with `start_line`. Patterns that are too long or too slow are refused with a message saying so."""

TASK_START_DOC = """\
Start a long-running command (a server, a watcher, a long build you want to poll) in the background of this
session and return at once with its `task_id` and `artifact_id`. Its stdout and stderr grow in that artifact
while it runs. Read new output with task_read(task_id, stream, offset) by byte offset: each read returns the next
offset to continue from. Stop it with task_stop; see all of this session's tasks with task_list. Background tasks
are checked and approved like bash commands."""

TASK_READ_DOC = """\
Read a background task's output from a byte offset (`offset`, 0 at the start) of `stream` ("stdout" or
"stderr"), up to `max_bytes` (a page also stops at the display budget, after a line). The result says the next
offset to pass to continue (following it reads every byte once), and whether the task is still running (with its
exit status once it has ended). Once it has ended, its complete output also stays readable with read_output /
search_output on the task's artifact_id."""

TASK_STOP_DOC = """\
Stop a background task: its whole process group is terminated (then killed after a grace period). Its output
stays readable with task_read, read_output and search_output."""

TASK_LIST_DOC = """\
List this session's background tasks: id, command, whether each is still running, its artifact id and, once
ended, its exit status."""


CommandArg = Annotated[str, Field(min_length=1, description="The bash command line, run as `bash -c COMMAND`.")]
CwdArg = Annotated[
    str | None, Field(description="Working directory (relative to the workspace, or absolute). Default: workspace.")
]
EnvArg = Annotated[
    dict[str, str] | None,
    Field(description="Extra environment variables for this command only (the base environment is scrubbed)."),
]
ArtifactIdArg = Annotated[
    str, Field(min_length=1, description="The artifact_id from an earlier bash, task or write result.")
]
StreamArg = Annotated[
    str | None, Field(description='"stdout" or "stderr". Default: the artifact\'s main stream (stdout).')
]
TaskIdArg = Annotated[str, Field(min_length=1, description="The task_id returned by task_start (or task_list).")]
