"""Certificates of verified compliance erasures (S6): what a certificate states comes from the
ledger (the request) and from the verified audit log (the scan), never from the request's row
alone, which the database holds."""

from __future__ import annotations

import json

from ...audit.chain import entry_from_dict
from ...audit.log import TransparencyLog
from ...backends import ops
from ...backends.base import Backend
from ...consumers import feed as consumer_feed
from ...crypto.provider import KeyProvider
from ...errors import ErasureNotProvableError
from ...ledger.journal import anchor_audit
from ...model import Certificate, Mode
from ..lifecycle.horizon import Horizons
from ..proof.audit_check import AuditCheck
from ..proof.verdicts import OPERATIONAL_GAP
from ..status import RequestStatus
from .certificate import Signer
from .sanitization import Requester, sanitization_fields

__all__ = ["Attestor"]


class Attestor:
    def __init__(
        self,
        backend: Backend,
        provider: KeyProvider,
        requests: RequestStatus,
        horizons: Horizons,
        audit: AuditCheck,
    ) -> None:
        self._backend = backend
        self._provider = provider
        self._requests = requests
        self._horizons = horizons
        self._audit = audit
        self._log = TransparencyLog(backend, lambda: self.signer().sign)

    def signer(self) -> Signer:
        return Signer.from_private_bytes(self._provider.signing_key())

    def attest(self, request_id: str, requester: Requester | None = None) -> Certificate:
        row = self._requests.row(request_id)
        if row.mode == Mode.OPERATIONAL:
            raise ErasureNotProvableError(OPERATIONAL_GAP, [OPERATIONAL_GAP])
        plan = self._audit.ledgered_plan(request_id)
        if plan["mode"] != Mode.COMPLIANCE:  # the ledger's word, not the row's
            raise ErasureNotProvableError(OPERATIONAL_GAP, [OPERATIONAL_GAP])
        status = self._requests.confirm(request_id)
        verified = self._audit.audited_verification(request_id)
        row = self._requests.row(request_id)
        horizon, reason = self._horizons.horizon(row, plan.get("epochs"))
        # what the certificate states comes from the ledger (the request) and from the verified
        # audit log (the scan), not from the request's row, which the database holds
        fields = {
            "request_id": plan["request_id"],
            "target": plan["target"],
            "target_kind": plan["target_kind"],
            "mode": plan["mode"],
            "requested_at": plan["requested_at"],
            "verified_at": verified.get("verified_at") or row.verified_at,
            "forget_version": plan["version"],
            "layers": {name: layer.to_dict() for name, layer in status.layers.items()},
            "scan": verified.get("scan") or dict(row.scan_evidence),
            "horizon": horizon.isoformat() if horizon else None,
            "horizon_reason": reason,
            "root_of_trust": self._provider.root_of_trust,
            **sanitization_fields(
                self._backend.describe(),
                verified.get("scan") or dict(row.scan_evidence),
                requester or Requester(),
            ),
        }
        with self._backend.read() as txn:
            asked = consumer_feed.standing(txn, row.id)
        # every acknowledgement is in the verified audit log (StorageError: the database was altered)
        consumer_feed.check_audited(asked, self._audit.verified()[0])
        # each downstream consumer asked, with its own statement (every one acknowledged: confirm passed)
        fields["consumers"] = [consumer_feed.statement(info, event) for info, event in asked]
        with self._backend.write() as txn:
            anchor_audit(self._provider, txn, "attest", {"request_id": row.id})
            tail = txn.run(ops.AuditTail())
        fields["audit_head"] = entry_from_dict(json.loads(tail[1])).head if tail else ""
        fields["log"] = self._log.inclusion(
            lambda entry: entry.event == "forget" and entry.fields.get("request_id") == row.id
        )
        return self.signer().sign_certificate(fields)
