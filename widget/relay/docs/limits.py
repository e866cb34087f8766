"""The docs index's bounds and defaults, each with its setting and its error (docs/deployment.md, "The site's
documentation")."""

from __future__ import annotations

from typing import Final

#: A page file larger than this is skipped with a warning (``--max-page-bytes``); its previous version stays.
MAX_PAGE_BYTES: Final = 10 * 1024 * 1024
#: An index run over more pages than this stops before it changes anything (``--max-pages``).
MAX_PAGES: Final = 20_000
#: Folders deeper than this under a source folder are not walked (a warning names the first one).
MAX_DEPTH: Final = 64
#: A section's text is cut here when stored (the rest of a giant section is rarely what a reader asks about).
MAX_SECTION_CHARS: Final = 100_000
#: A section's text is searched in passages of about this many characters (a section ranks by its best one).
CHUNK_CHARS: Final = 600
#: Sections of one page beyond this are dropped with a warning (a generated page with thousands of headings).
MAX_SECTIONS_PER_PAGE: Final = 2_000
#: A reader's question is cut to this many characters before it is split into terms (never refused).
MAX_QUERY_CHARS: Final = 2_000
#: At most this many distinct terms of a question are searched (the first ones).
MAX_QUERY_TERMS: Final = 32
#: A term longer than this is cut (a 10,000-letter "word" is noise, not a word).
MAX_TERM_CHARS: Final = 64
#: A search scores at most about this many passages: the question's rarest words are searched in all text while
#: the passages they match stay under it, the commoner ones only in headings (each scored passage costs a few
#: microseconds; a word in most passages says little about what the question is about).
MAX_SCORED_PASSAGES: Final = 3_000
#: The most passages one search scores, whatever the terms' statistics say (a question of only very common words).
SCORED_CAP: Final = 4 * MAX_SCORED_PASSAGES
#: Sections a search returns at most, whatever ``limit`` asks.
MAX_SEARCH_LIMIT: Final = 50
#: Pages written per transaction while indexing into SQLite: short transactions keep the relay's own writes
#: (which share the file) from waiting behind a long re-index.
SQLITE_BATCH_PAGES: Final = 200
#: How long an index run holds its app's lock without renewing it (a crashed run's lock expires).
LOCK_LEASE_S: Final = 120.0
#: The docs tables' layout (both engines). An index in another layout is dropped when a relay or the CLI opens
#: the store, with a warning: it is derived data, and ``autopilot-relay index`` builds it again.
SCHEMA_VERSION: Final = 2
#: Bumped when extraction changes, so the next run re-extracts every page instead of trusting old hashes.
EXTRACTOR_VERSION: Final = "1"
