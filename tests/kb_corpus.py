"""A deterministic corpus for the knowledge base's retrieval tests: a fictional service's docs.

Twelve components share one vocabulary (server, settings, default, seconds,
request, file, user...), so a question's words appear in many files; each
component has a manual (markdown), a module (code) and notes, with filler
paragraphs drawn from the same templates for every component, and a
changelog and an FAQ that mention every component. Thirty facts sit in
their files among the filler; each comes with a question asked in other
words, and the file and line a hit must cover.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

COMPONENTS = [
    "cache", "scheduler", "auth", "storage", "webhooks", "metrics",
    "backup", "search", "mailer", "queue", "gateway", "cli",
]  # fmt: skip

FILLER = [
    "The {c} reads its settings from config.toml when the server starts.",
    "Every request that reaches the {c} is logged with its user and duration.",
    "A default value is used when a setting of the {c} is missing from the file.",
    "The {c} can be restarted without stopping the server; pending work is kept.",
    "Errors of the {c} are reported in the server log with a short code.",
    "Administrators may change the {c} settings at run time through the admin page.",
    "The {c} exposes a health check that answers within a few seconds.",
    "Tests of the {c} run against a local server started by the test suite.",
    "When the {c} is disabled, requests that need it fail with a clear error.",
    "The {c} keeps its state in the data folder next to the other components.",
    "Upgrading the {c} requires no migration unless the release notes say so.",
    "Each user action that the {c} performs is recorded in the audit file.",
    "The {c} limits the size of its input so that one user cannot slow the server.",
    "Timeouts of the {c} are given in seconds and may be changed in the settings.",
    "A failed {c} operation is logged and may be retried by hand several times.",
    "The maximum number of open connections of the {c} is a setting.",
    "Each page of the admin interface shows the {c} status.",
    "The {c} listens on the port given in its settings file.",
    "Messages about the {c} are written to the log every few minutes.",
    "Files written by the {c} are signed and kept on disk.",
    "The {c} command line has a flag for each setting.",
    "Old entries of the {c} expire according to the retention setting.",
    "The {c} sends an email to the user when a long operation ends.",
    "Tokens, keys and passwords of the {c} are never written to the log.",
    "Times shown by the {c} use the timezone of the server.",
    "The server exports the logs of the {c} once a day.",
    "The {c} ships with a shell script to install it as a service.",
    "Notifications of the {c} are collected and sent as a daily summary.",
    "Data the {c} encrypts at rest uses the key of the server; backups keep it too.",
]


@dataclass(frozen=True)
class Fact:
    """A sentence placed in ``path``, and a question whose answer it is."""

    component: str
    path: str
    sentence: str
    question: str


FACTS = [
    ("cache", "md", "Entries in the cache expire after 300 seconds unless cache.ttl is set.",
     "how long until cached entries expire by default"),
    ("cache", "py", "MAX_CACHE_ITEMS = 50000  # the cache evicts the least recently used item beyond this",
     "what is the maximum number of items the cache keeps before eviction"),
    ("scheduler", "md", "The scheduler retries a failed job three times with exponential backoff.",
     "how many times is a failed job retried"),
    ("scheduler", "txt", "Cron expressions use the server's local timezone, not UTC, in the scheduler.",
     "which timezone do cron expressions use"),
    ("auth", "md", "Passwords are hashed with argon2id and a per-user salt.",
     "which algorithm hashes passwords"),
    ("auth", "md", "Sessions are invalidated after 12 hours of inactivity.",
     "when do idle sessions get invalidated"),
    ("auth", "py", "TOKEN_ALGORITHM = 'EdDSA'  # API tokens are signed with Ed25519 keys",
     "what signature algorithm do api tokens use"),
    ("storage", "md", "Uploaded files are stored under /var/lib/orbit/blobs in content-addressed folders.",
     "where on disk are uploaded files stored"),
    ("storage", "txt", "The storage quota per user defaults to 5 gigabytes.",
     "what is the default storage quota for a user"),
    ("webhooks", "md", "Webhook payloads are signed with an HMAC-SHA256 header named X-Orbit-Signature.",
     "how are webhook payloads signed"),
    ("webhooks", "md", "A webhook endpoint that fails 20 times in a row is disabled automatically.",
     "when is a failing webhook endpoint disabled"),
    ("metrics", "md", "Prometheus metrics are served on port 9464 at /metrics.",
     "which port serves prometheus metrics"),
    ("metrics", "py", "HISTOGRAM_BUCKETS = (0.005, 0.05, 0.5, 5.0)  # request latency buckets in seconds",
     "what histogram buckets are used for request latency"),
    ("backup", "md", "Nightly backups run at 02:30 and keep the last 14 archives.",
     "how many backup archives are kept"),
    ("backup", "txt", "Backups are encrypted with age using the recipient key in backup.recipients.",
     "what tool encrypts the backups"),
    ("search", "md", "The search index is rebuilt from scratch with the orbit reindex command.",
     "which command rebuilds the search index"),
    ("search", "md", "Search results are paginated 25 per page.",
     "how many search results appear on each page"),
    ("mailer", "md", "Outgoing mail goes through the SMTP relay configured as mailer.relay_host.",
     "which setting names the smtp relay host"),
    ("mailer", "txt", "Bounce notifications are collected in the bounces mailbox every 10 minutes.",
     "how often are bounce notifications collected"),
    ("queue", "md", "Messages left unacknowledged for 60 seconds are redelivered to another worker.",
     "when is an unacknowledged message redelivered"),
    ("queue", "py", "DEAD_LETTER_QUEUE = 'orbit.dead'  # messages rejected five times go here",
     "where do messages go after being rejected repeatedly"),
    ("gateway", "md", "The gateway terminates TLS 1.3 and refuses TLS 1.0 and 1.1 connections.",
     "which tls versions does the gateway refuse"),
    ("gateway", "md", "Rate limiting allows 100 requests per minute per API key at the gateway.",
     "what is the rate limit per api key"),
    ("gateway", "txt", "CORS is restricted to the origins listed in gateway.allowed_origins.",
     "which setting lists the allowed cors origins"),
    ("cli", "md", "Shell completion is installed with orbit completion install for bash and zsh.",
     "how do I install shell completion"),
    ("cli", "md", "The --dry-run flag prints the planned changes without applying them.",
     "which flag shows planned changes without applying them"),
    ("cli", "py", "EXIT_CONFIG_ERROR = 78  # the process exits with this code on an invalid config file",
     "what exit code means the config file is invalid"),
    ("storage", "md", "Deleted files stay in the trash for 30 days before they are purged.",
     "how long do deleted files remain in the trash"),
    ("mailer", "md", "Email templates are written in Jinja2 and live in templates/mail.",
     "what language are email templates written in"),
    ("metrics", "txt", "Traces are exported over OTLP to the collector at otel.endpoint.",
     "what protocol exports traces to the collector"),
]  # fmt: skip


def facts() -> list[Fact]:
    """The thirty facts, with the file each lives in."""
    out = []
    for component, ext, sentence, question in FACTS:
        path = {"md": f"docs/{component}.md", "py": f"src/orbit/{component}.py",
                "txt": f"notes/{component}.txt"}[ext]  # fmt: skip
        out.append(Fact(component, path, sentence, question))
    return out


def _para(rng: random.Random, component: str, n: int) -> str:
    others = [c for c in COMPONENTS if c != component]
    lines = []
    for _ in range(n):
        c = component if rng.random() < 0.7 else rng.choice(others)
        lines.append(rng.choice(FILLER).format(c=c))
    return "\n".join(lines)


def write_corpus(root: Path, seed: int = 15) -> dict[str, int]:
    """Write the corpus under ``root``; return each fact sentence's line number in its file."""
    rng = random.Random(seed)
    by_path: dict[str, list[Fact]] = {}
    for fact in facts():
        by_path.setdefault(fact.path, []).append(fact)
    files: dict[str, list[str]] = {}
    for c in COMPONENTS:
        manual = [f"# The {c}", "", _para(rng, c, 3), ""]
        for section in ("Overview", "Configuration", "Operations", "Troubleshooting"):
            manual += [f"## {section}", "", _para(rng, c, 4), "", _para(rng, c, 3), ""]
        files[f"docs/{c}.md"] = "\n".join(manual).split("\n")
        module = [f'"""The {c} component of orbit."""', "", "import logging", ""]
        for fn in ("start", "stop", "reload", "status"):
            module += [
                f"def {fn}(settings):",
                f'    """{rng.choice(FILLER).format(c=c)}"""',
                f"    logging.info('{c} {fn}')",
                "    return settings",
                "",
                "",
            ]
        files[f"src/orbit/{c}.py"] = module
        files[f"notes/{c}.txt"] = (
            f"Notes on the {c}\n\n{_para(rng, c, 5)}\n\n{_para(rng, c, 5)}\n".split("\n")
        )
    changelog = ["# Changelog", ""]
    for v in range(30, 0, -1):
        changelog += [f"## 1.{v}.0", ""]
        for c in rng.sample(COMPONENTS, 3):
            changelog.append(f"- {rng.choice(FILLER).format(c=c)}")
        changelog.append("")
    files["CHANGELOG.md"] = changelog
    faq = ["FAQ", "===", ""]
    for c in COMPONENTS:
        faq += [f"Is the {c} required?", "-" * 24, "", _para(rng, c, 2), ""]
    files["docs/faq.rst"] = faq
    lines_of: dict[str, int] = {}
    for path, placed in by_path.items():
        lines = files[path]
        for fact in placed:
            if path.endswith(".py"):
                lines.append(fact.sentence)
                continue
            # into a paragraph of the file (after a filler line), never at its top
            starts = tuple({t.split()[0] + " " for t in FILLER})
            candidates = [i for i, line in enumerate(lines) if line.startswith(starts)]
            lines.insert(rng.choice(candidates[2:]) + 1, fact.sentence)
    for path, lines in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n")
    for fact in facts():
        lines_of[fact.sentence] = (root / fact.path).read_text().split("\n").index(
            fact.sentence
        ) + 1
    return lines_of
