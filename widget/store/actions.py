"""Offered actions in the headless store: where each live offer is shown, its state, and the reader's side of it.

An offer comes from the client (offers received in this page session) and from the conversation's ``action``
messages (an outcome recorded by another tab). A restored conversation has none: offers are live only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..protocol import ActionConfirm, OfferStatus, Role
from .context import OffersClient
from .forms import FORM_FIX, form_arguments, message_of

#: Offered-action states (``status`` of ``store.actions_for(...)`` entries), the client's offer statuses.
ACTION_OFFERED = OfferStatus.OFFERED
ACTION_RUNNING = OfferStatus.RUNNING
ACTION_DONE = OfferStatus.DONE
ACTION_FAILED = OfferStatus.FAILED


class OfferedActions:
    """The store's offered actions: placement under shown messages, per-offer reader state, running them.

    It gets the client's offers, the shown messages (reading them places the offers), the store's revision (the
    offers by message are rebuilt when it moved) and ``changed()``, which bumps the revision and says "actions".
    """

    def __init__(
        self,
        client: OffersClient,
        *,
        shown: Callable[[], list[dict[str, Any]]],
        revision: Callable[[], int],
        changed: Callable[[], None],
    ) -> None:
        self._client = client
        self._shown = shown
        self._revision = revision
        self._changed = changed
        #: Message ids with offers seen live, in the order they came.
        self.offered_ids: list[str] = []
        #: The reader's side of each offer (form open, values, errors, running), by (message id, action id).
        self._ui: dict[tuple[str, str], dict[str, Any]] = {}
        #: The shown message each offering message's offers go under (decided with the message list).
        self._anchor: dict[str, str] = {}
        self._cache: dict[str, list[dict[str, Any]]] = {}
        self._cached_at = -1

    def offered(self, message_id: str) -> None:
        """The client offered actions on ``message_id`` in this page session."""
        if message_id not in self.offered_ids:
            self.offered_ids.append(message_id)

    def forget(self) -> None:
        """A new conversation: no offers (they are never restored)."""
        self.offered_ids.clear()
        self._ui.clear()

    def place(self, raw: list[dict[str, Any]], shown: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Decide under which shown message each live offer goes; returns ``shown`` (with carriers added).

        Offers sit on the round's assistant message. When that message is not shown by itself (an empty round
        merged into the previous one's call pills, or a round that only offered), they go under the turn's
        previous shown answer; when the turn shows none, the offering message is shown (empty) to carry them.
        """
        client = self._client
        self._anchor = {}
        offered = set(self.offered_ids)
        candidates = [
            m["id"] for m in raw
            if m.get("role") == Role.ASSISTANT and isinstance(m.get("id"), str)
            and (m["id"] in offered or m.get("actions"))
        ]
        live = [mid for mid in candidates if client.get_offered_actions(mid)]
        if not live:
            return shown
        visible = {m.get("id") for m in shown}
        position = {m.get("id"): i for i, m in enumerate(raw)}
        for mid in live:
            anchor = mid if mid in visible else None
            i = position[mid]
            if anchor is None:
                for j in range(i - 1, -1, -1):
                    role = raw[j].get("role")
                    if role == Role.USER:
                        break
                    if role == Role.ASSISTANT and raw[j].get("id") in visible:
                        anchor = raw[j]["id"]
                        break
            if anchor is None:
                at = 0
                for k, m in enumerate(shown):
                    if position.get(m.get("id"), -1) < i:
                        at = k + 1
                carrier = {"id": mid, "role": Role.ASSISTANT, "content": "", "function_calls": []}
                shown = shown[:at] + [carrier] + shown[at:]
                visible.add(mid)
                anchor = mid
            self._anchor[mid] = anchor
        return shown

    # --- reading ---------------------------------------------------------------------------------
    @property
    def by_message(self) -> dict[str, list[dict[str, Any]]]:
        """Live offers by the id of the shown message they go under (rebuilt when the store's revision moved)."""
        self._shown()  # placement is decided with the message list
        revision = self._revision()
        if self._cached_at != revision:
            self._cache = self._build()
            self._cached_at = revision
        return self._cache

    def _build(self) -> dict[str, list[dict[str, Any]]]:
        client = self._client
        recorded: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        for m in client.messages:
            if m.get("role") == Role.ACTION:
                recorded.setdefault((m.get("message_id"), m.get("action_id")), []).append(m)
        out: dict[str, list[dict[str, Any]]] = {}
        for mid, anchor in self._anchor.items():
            for offer in client.get_offered_actions(mid):
                view = self._offer_view(mid, offer, recorded.get((mid, offer.get("id")), []))
                out.setdefault(anchor, []).append(view)
        return out

    def _offer_view(self, mid: str, offer: dict[str, Any], recorded: list[dict[str, Any]]) -> dict[str, Any]:
        ui = self._ui.get((mid, offer["id"]), {})
        status, outcome = offer.get("status") or ACTION_OFFERED, offer.get("outcome")
        succeeded = [r for r in recorded if r.get("ok") is True]
        if status == ACTION_DONE:
            pass
        elif succeeded:  # done in another tab of this conversation: never offered twice
            status, outcome = ACTION_DONE, succeeded[-1].get("outcome")
        elif ui.get("running") or status == ACTION_RUNNING:
            status = ACTION_RUNNING
        elif status == ACTION_FAILED:
            pass
        elif recorded:
            status, outcome = ACTION_FAILED, recorded[-1].get("outcome")
        if status == ACTION_DONE:
            outcome = outcome if isinstance(outcome, str) and outcome else "Done."
        elif status == ACTION_FAILED:
            outcome = outcome if isinstance(outcome, str) and outcome else "The action failed."
        else:
            outcome = None
        error = ui.get("error")
        if error is None and status == ACTION_FAILED:
            error = outcome
        return {
            "id": offer["id"],
            "name": offer.get("name"),
            "label": offer.get("label") or offer.get("name"),
            "title": offer.get("title"),
            "confirm": offer.get("confirm"),
            "parameters": offer.get("parameters") or {"type": "object", "properties": {}},
            "arguments": dict(offer.get("arguments") or {}),
            "message_id": mid,
            "status": status,
            "outcome": outcome,
            "error": None if status == ACTION_DONE else error,
            "field_errors": {} if status == ACTION_DONE else dict(ui.get("field_errors") or {}),
            "form_open": (bool(ui.get("form_open")) and status != ACTION_DONE
                          and offer.get("confirm") == ActionConfirm.FORM),
            "values": ui.get("values"),
        }

    def find(self, message_id: Any, action_id: Any) -> dict[str, Any] | None:
        """The offer ``action_id`` of ``message_id`` (or shown under it), if live."""
        for anchor, offers in self.by_message.items():
            for o in offers:
                if o["id"] == action_id and message_id in (o["message_id"], anchor):
                    return o
        return None

    def _reader(self, offer: dict[str, Any]) -> dict[str, Any]:
        return self._ui.setdefault((offer["message_id"], offer["id"]), {})

    # --- what the reader does ----------------------------------------------------------------------
    async def press(self, message_id: Any, action_id: Any) -> bool:
        """A button action runs; a form action opens its form (see ``Store.press_action``)."""
        offer = self.find(message_id, action_id)
        if offer is None or offer["status"] in (ACTION_DONE, ACTION_RUNNING):
            return False
        if offer["confirm"] == ActionConfirm.FORM:
            self.open_form(message_id, action_id)
            return True
        return await self._run(offer, None)

    def open_form(self, message_id: Any, action_id: Any) -> bool:
        """Open the form of a form action (prefilled with the reader's last values, else the model's)."""
        offer = self.find(message_id, action_id)
        if offer is None or offer["confirm"] != ActionConfirm.FORM or offer["status"] == ACTION_DONE:
            return False
        ui = self._reader(offer)
        if not ui.get("form_open"):
            ui["form_open"] = True
            self._changed()
        return True

    def cancel_form(self, message_id: Any, action_id: Any) -> None:
        """Close an action's form without sending; its field errors go, the offer stays."""
        offer = self.find(message_id, action_id)
        if offer is None:
            return
        ui = self._reader(offer)
        if ui.get("form_open") or ui.get("field_errors") or ui.get("error"):
            ui.update(form_open=False, field_errors={}, error=None)
            self._changed()

    def clear_field_error(self, message_id: Any, action_id: Any, name: str) -> None:
        """Forget the error of one form field (the reader changed it)."""
        offer = self.find(message_id, action_id)
        if offer is None:
            return
        errors = self._reader(offer).get("field_errors") or {}
        if name in errors:
            del errors[name]
            self._changed()

    async def submit_form(self, message_id: Any, action_id: Any, values: dict[str, Any]) -> bool:
        """Check the reader's ``values`` against the action's schema, then run it (see ``Store.submit_action_form``)."""
        offer = self.find(message_id, action_id)
        if offer is None or offer["status"] in (ACTION_DONE, ACTION_RUNNING):
            return False
        ui = self._reader(offer)
        ui["values"] = dict(values) if isinstance(values, dict) else {}
        args, problems = form_arguments(offer["parameters"], ui["values"])
        if problems:
            ui.update(form_open=True, field_errors=problems, error=FORM_FIX)
            self._changed()
            return False
        ui.update(field_errors={})
        return await self._run(offer, args)

    async def _run(self, offer: dict[str, Any], args: dict[str, Any] | None) -> bool:
        ui = self._reader(offer)
        ui.update(running=True, error=None)
        self._changed()
        ok = False
        try:
            result = await self._client.run_action(offer["message_id"], offer["id"], args)
            ok = bool(result.get("ok"))
            if not ok:
                ui["error"] = str(result.get("outcome") or "The action failed.")
        except Exception as exc:  # noqa: BLE001 - shown with the offer, which stays for a retry
            ui["error"] = message_of(exc)
        finally:
            ui["running"] = False
        if ok:
            ui.update(form_open=False, field_errors={}, error=None)
        self._changed()
        return ok
