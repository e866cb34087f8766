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
#: microseconds; a word in most passages says little about what the question is about). The largest that keeps a
#: search's p95 within 20 ms at 100,000 sections with room to spare; a smaller one cut words that matter from
#: the questions on a docs site of a few thousand sections (docs/decisions.md).
MAX_SCORED_PASSAGES: Final = 5_000
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
EXTRACTOR_VERSION: Final = "4"

# -- crawling a site that is online (``autopilot-relay index URL``, widget/relay/docs/crawl.py) --
#: Link hops from the start page a crawl follows (``--max-depth``); deeper pages are not fetched (counted).
CRAWL_MAX_DEPTH: Final = 20
#: Requests a crawl has in flight at once (``--concurrency``, 1 to ``MAX_CRAWL_CONCURRENCY``).
CRAWL_CONCURRENCY: Final = 4
MAX_CRAWL_CONCURRENCY: Final = 16
#: One request, body included, fails after this many seconds (``--timeout``).
CRAWL_TIMEOUT_S: Final = 30.0
#: A robots.txt ``Crawl-delay`` (or ``Request-rate``) longer than this is shortened to it, with a warning
#: (``--max-crawl-delay``): a site cannot make a run last for days.
MAX_CRAWL_DELAY_S: Final = 10.0
#: Redirects followed for one URL (a longer chain is a warning and the URL is not indexed).
MAX_REDIRECTS: Final = 10
#: robots.txt is read up to this size (RFC 9309 asks crawlers to read at least 500 KiB).
MAX_ROBOTS_BYTES: Final = 512 * 1024
#: One sitemap file, after gzip (the sitemap protocol's own limit), and sitemap files read per site.
MAX_SITEMAP_BYTES: Final = 50 * 1024 * 1024
MAX_SITEMAPS: Final = 100
#: A link longer than this is not followed (an endless generated URL is not a page).
MAX_URL_CHARS: Final = 2_048
#: Bytes a crawl downloads in all (pages are kept in a temporary folder until the index run is done).
MAX_CRAWL_BYTES: Final = 2 * 1024 * 1024 * 1024
