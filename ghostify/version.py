"""The package version (its own module: ``record`` stamps it into histories without importing the
package's public facade, which imports ``checkpoint``)."""

from __future__ import annotations

__version__ = "0.1.0"
