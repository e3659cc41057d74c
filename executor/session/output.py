"""Output recovery: ``read_output`` and ``search_output``, the same for a live session and without one.

Artifacts live on the host, so a stored stream can be read after its session's container is gone (the CLI's
``executor output read|search``). Either way a page is rendered with the reader's hints, sanitized through the
judge's ``sanitize`` reflex (failing closed to the deterministic detector) and the judgment is journaled in the
artifact's session journal: one path for every surface.
"""

from __future__ import annotations

from executor.artifacts import SessionArtifacts
from executor.session.api import ToolResult
from executor.session.presentation import Views

__all__ = ["OutputTools"]


class OutputTools:
    """The recovery tools over one session's artifacts."""

    def __init__(self, *, artifacts: SessionArtifacts, views: Views) -> None:
        self._artifacts = artifacts
        self._views = views

    async def read_output(
        self,
        artifact_id: str,
        *,
        stream: str | None = None,
        start_line: int = 1,
        line_count: int | None = None,
        start_byte_in_line: int | None = None,
    ) -> ToolResult:
        """See :meth:`executor.session.Session.read_output`."""
        artifact_id = self._artifacts.current(artifact_id)
        page = self._artifacts.read_output(
            artifact_id,
            stream=stream,
            start_line=start_line,
            line_count=line_count,
            start_byte_in_line=start_byte_in_line,
        )
        notes: list[str] = []  # lines above the page's own header
        task_id = self._artifacts.detached_task(artifact_id)
        if task_id is not None:
            # Still the cut-short mirror: the task has not ended yet (else current() led to its whole output).
            hint = self._views.hints.task_read(task_id, session_id=self._views.session_id)
            notes.append(
                f"[task {task_id} is still running: this artifact holds what was mirrored of its output before the "
                f"process that started it ended; {hint} reads the task's output now, and this id leads to its whole "
                "output once it has ended]"
            )
        lost = self._artifacts.record(artifact_id).meta.get(f"lost_{page.stream}_bytes")
        if lost is not None:
            notes.append(
                f"[{lost} bytes of this task's {page.stream} were lost before the host kept them: the agent's "
                "buffer for a task's output (agent.detached_buffer_bytes) filled first; the bytes shown are the "
                "rest, in order]"
            )
        shown = "\n".join(notes if page.empty_source and notes else [*notes, self._views.read_page(page)])
        first = 2 + len(notes)  # the page's first stream line follows its header line and the notes
        neighbours = self._views.page_neighbours(page, first_line_of_page=first)
        text = await self._views.sanitize(shown, artifact_id=artifact_id, neighbours=neighbours)
        return ToolResult(
            tool="read_output",
            outcome="completed",
            text=text,
            artifact_id=artifact_id,
            # The receipts only: the page's bytes are shown (sanitized) in ``text``, never raw in the data.
            data=page.model_dump(mode="json", exclude={"text", "data"}),
        )

    async def search_output(
        self,
        artifact_id: str,
        *,
        pattern: str,
        stream: str | None = None,
        limit: int = 20,
        start_line: int = 1,
    ) -> ToolResult:
        """See :meth:`executor.session.Session.search_output`."""
        artifact_id = self._artifacts.current(artifact_id)
        page = await self._artifacts.search_output(
            artifact_id,
            stream=stream,
            pattern=pattern,
            limit=limit,
            start_line=start_line,
            redactor=self._views.search_redactor(artifact_id),
        )
        text = await self._views.sanitize(self._views.search_page(page), artifact_id=artifact_id)
        return ToolResult(
            tool="search_output",
            outcome="completed",
            text=text,
            artifact_id=artifact_id,
            data=page.model_dump(mode="json", exclude={"matches": {"__all__": {"text"}}}),
        )
