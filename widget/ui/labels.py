"""Every text the bar shows that is not model output, in one table (English defaults).

Pass ``labels={...}`` to ``enable_bar`` to override some of them (a translation is one dict); pages set them with
the loader option ``labels`` (``data-labels`` / ``window.AutopilotConfig.labels``, docs/embedding.md). Values with
``{name}`` placeholders are formatted with ``str.format``.
"""

from __future__ import annotations

LABELS: dict[str, str] = {
    # header
    "title": "Autopilot",
    "new_chat": "New chat",
    "activity": "Activity",
    "activity_open": "Show the activity log",
    "activity_close": "Back to the conversation",
    "history_open": "Past conversations",
    "history_close": "Back to the conversation",
    "close": "Close {title}",
    "open": "Open {title}",
    "dialog": "{title}",
    # connection states
    "state_idle": "Not connected",
    "state_connecting": "Connecting…",
    "state_connected": "Connected",
    "state_reconnecting": "Reconnecting…",
    "state_disconnected": "Disconnected",
    "state_error": "Connection error",
    # notices
    "retry": "Retry",
    "regenerate": "Regenerate",
    "dismiss": "Dismiss",
    "read_only": "This conversation is open in another tab; it is read-only here.",
    "use_here": "Use here",
    # conversation
    "conversation": "Conversation",
    "empty_title": "How can I help?",
    "empty_text": "Ask about this page. I can also use the page's functions for you.",
    "you": "You",
    "assistant": "Assistant",
    "error": "Error",
    "stopped": "Stopped",
    "thinking": "Thinking…",
    # one press sends these as the reader's message
    "starters": "Suggested questions",
    "suggestions": "Follow-up questions",
    # function calls
    "call_running": "Running",
    "call_success": "Done",
    "call_error": "Failed",
    "call_stopped": "Stopped",
    "call_waiting_user": "Waiting for your answer",
    "call_details": "Details of {name}",
    "arguments": "Arguments",
    "result": "Result",
    "error_text": "Error",
    "handler_time": "Handler",
    "total_time": "Total",
    "ms": "{value} ms",
    "no_arguments": "(none)",
    # activity log
    "activity_title": "Activity log",
    "activity_empty": "No function calls yet.",
    # past conversations
    "history_title": "Past conversations",
    "history_loading": "Loading…",
    "history_empty": "No past conversations yet.",
    "history_failed": "Past conversations could not be loaded: {message}",
    "history_current": "Current",
    "history_delete": "Delete “{title}”",
    "history_confirm": "Delete “{title}”? This cannot be undone.",
    "history_delete_yes": "Delete",
    "history_delete_no": "Cancel",
    # confirmation
    "confirm_title": "Allow “{name}” to run?",
    "confirm_text": "The assistant wants to run this page function with these arguments:",
    "confirm_text_mcp": "The assistant wants the relay to run the tool “{tool}” of the MCP server “{server}” (not "
                        "on this page) with these arguments:",
    "confirm_text_webmcp": "An in-browser agent (WebMCP, not this site's assistant) wants to run this page "
                           "function with these arguments:",
    "allow": "Allow",
    "deny": "Deny",
    # ask user
    "ask_title": "The assistant asks",
    "ask_question": "Question {n}",
    "ask_submit": "Send answers",
    "ask_sending": "Sending…",
    "ask_yes": "Yes",
    "ask_no": "No",
    "ask_required_text": "Please type an answer.",
    "ask_required_choice": "Please choose an option.",
    "ask_fix": "Some answers are missing.",
    # offered actions: the page's labels go on the buttons; these are the bar's own words around them
    "actions": "Suggested actions",
    "action_with": "With {args}",
    "action_running": "Working…",
    "action_send": "Send",
    "action_cancel": "Cancel",
    "action_choose": "Choose…",
    "action_yes": "Yes",
    "action_no": "No",
    "action_required": "(required)",
    # under an answer: copy and rate it
    "answer_tools": "Copy or rate this answer",
    "copy_markdown": "Copy",
    "copy_text": "Copy as text",
    "copy_code": "Copy code",
    "copy_code_n": "Copy code {n}",
    "copied": "Copied",
    "copy_failed": "Copy failed",
    "rate_up": "Good answer",
    "rate_down": "Bad answer",
    "rate_failed": "Your rating was not saved: {message}",
    # an answer's cited sources: the list under it, a docs row's origin, a marker's name
    "sources": "Sources",
    "source_site": "from the site",
    "source_new_tab": "(opens in a new tab)",
    "source_marker": "Source {n}: {source}",
    # the optional comment after a thumb
    "comment_add": "Add a comment",
    "comment_edit": "Edit comment",
    "comment_form": "Comment on this answer",
    "comment_label": "Your comment (optional)",
    "comment_hint": "Ctrl+Enter to send · Esc to cancel",
    "comment_count": "{n} / {max}",
    "comment_send": "Send",
    "comment_cancel": "Cancel",
    "comment_too_long": "Too long: a comment has at most {max} characters. Shorten it to send; nothing was sent.",
    "comment_failed": "Not sent: {message}. Your text is still here; try again.",
    "comment_thanks": "Thanks for your feedback!",
    # composer
    "input": "Message",
    "placeholder": "Ask anything…",
    "placeholder_wait_function": "Waiting for the page…",
    "placeholder_wait_confirmation": "Answer the request above first…",
    "placeholder_wait_ask_user": "Answer the questions above first…",
    "placeholder_offline": "Not connected",
    "placeholder_read_only": "Read-only in this tab",
    "send": "Send",
    "stop": "Stop",
    "hint": "Enter to send · Shift+Enter for a new line",
    "hint_held": "Sends once connected…",
    # the loader, before Python runs (static/autopilot.js keeps a copy of these keys; a test checks they match)
    "starting": "Starting {title}…",
    "boot_failed": "{title} could not start ({stage}): {message}",
    "csp_wasm": "{title} cannot start on this page: its Content-Security-Policy blocks WebAssembly "
                "(the site needs to add 'wasm-unsafe-eval' to script-src).",
    "origin_refused": "{title} cannot start: this page's origin {origin} is not allowed for app {app} on the relay "
                      "{relay}. Add it to the app's allowed origins.",
    "relay_unreachable": "{title} cannot start: the relay {relay} does not answer ({message}).",
    "stage_python": "loading Python",
    "stage_bundle": "installing the bundle",
    "stage_widget": "starting the widget",
}


def merged(overrides: dict[str, str] | None) -> dict[str, str]:
    """The default table with ``overrides`` applied (unknown keys are kept; they do no harm)."""
    table = dict(LABELS)
    if overrides:
        table.update({str(k): str(v) for k, v in overrides.items()})
    return table
