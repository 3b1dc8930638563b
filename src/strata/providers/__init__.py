"""Model providers: one protocol, adapters for OpenAI, Anthropic, scripted and replayed models.

See :mod:`strata.providers.base` for the types every adapter speaks,
:mod:`strata.providers.config` for how a provider is chosen and configured,
and :mod:`strata.providers.profile` for seed 000's OpenAI request profile.
Adapters are imported when used (``strata.providers.openai``,
``.anthropic``, ``.scripted``), so importing this package loads no SDK.
"""

from strata.providers.base import (
    CancelToken,
    Finished,
    Message,
    Provider,
    Request,
    Response,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    Usage,
    complete,
)
from strata.providers.config import ProviderSettings, open_provider, providers, resolve
from strata.providers.transport import DEFAULT_DELAYS, Retry

__all__ = [
    "DEFAULT_DELAYS",
    "CancelToken",
    "Finished",
    "Message",
    "Provider",
    "ProviderSettings",
    "Request",
    "Response",
    "Retry",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallEvent",
    "ToolSpec",
    "Usage",
    "complete",
    "open_provider",
    "providers",
    "resolve",
]
