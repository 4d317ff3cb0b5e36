"""What a check says. Shared by the check kinds, the runner, the journal and the UI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from console.core.text.redaction import Redactor

Status = Literal["pass", "warn", "fail"]
CHECK_GLYPHS: dict[str, str] = {"pass": "✓", "warn": "!", "fail": "✗"}  # the CLI's and the UI's mark


@dataclass
class CheckResult:
    name: str
    kind: str
    severity: str  # "error" | "warning"
    status: Status  # a failing warning-severity check reports "warn"
    message: str  # one line an operator understands at a glance
    evidence: dict[str, Any] = field(default_factory=dict)  # numbers, paths, matching line
    overridden: bool = False
    reason: str | None = None  # the operator's reason when overridden

    @property
    def blocking(self) -> bool:
        return self.status == "fail" and not self.overridden

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "severity": self.severity,
            "status": self.status,
            "message": self.message,
            "evidence": self.evidence,
            "overridden": self.overridden,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckResult:
        fields: dict[str, Any] = {k: d.get(k) for k in ("name", "kind", "severity", "status", "message")}
        return cls(**fields,
                   evidence=d.get("evidence") or {}, overridden=bool(d.get("overridden")),
                   reason=d.get("reason"))


def redact_results(results: list[CheckResult], redactor: Redactor) -> list[CheckResult]:
    """Check results with messages and evidence redacted (new objects; the inputs are kept)."""
    if not redactor:
        return results
    return [CheckResult.from_json(redactor.obj(r.to_json())) for r in results]
