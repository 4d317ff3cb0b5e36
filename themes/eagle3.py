"""The console's themes as Textual `Theme` objects. The stylesheet (console/ui/console.tcss)
uses only theme variables, so these colours are the whole look.

- eagle3-dark: the default; readable on a dark terminal over SSH.
- eagle3-light: for light terminals and projectors.
- eagle3-ansi: the terminal's own 16-colour palette and background, for operators whose
  terminal scheme is tuned (or who run without true colour).
"""

from __future__ import annotations

from textual.theme import Theme

DARK = Theme(
    name="eagle3-dark",
    primary="#5FA8D3",
    secondary="#3D6A8A",
    accent="#E0A458",
    warning="#F0B429",
    error="#E5534B",
    success="#57AB5A",
    foreground="#D8DEE4",
    background="#14181D",
    surface="#1B2027",
    panel="#242B34",
    dark=True,
)

LIGHT = Theme(
    name="eagle3-light",
    primary="#0B63A8",
    secondary="#4A7BA6",
    accent="#A35200",
    warning="#9A6700",
    error="#C4302B",
    success="#1A7F37",
    foreground="#1F2328",
    background="#FAFBFC",
    surface="#F0F2F5",
    panel="#E1E6EC",
    dark=False,
)

ANSI = Theme(
    name="eagle3-ansi",
    ansi=True,
    primary="ansi_blue",
    secondary="ansi_cyan",
    accent="ansi_magenta",
    warning="ansi_yellow",
    error="ansi_red",
    success="ansi_green",
    foreground="ansi_default",
    background="ansi_default",
    surface="ansi_default",
    panel="ansi_default",
    boost="ansi_default",
    dark=True,
    variables={
        # Textual's own widgets (buttons, toasts, screens) read these under an ANSI theme.
        "ansi-background": "ansi_default",
        "ansi-foreground": "ansi_default",
        "border": "ansi_blue",
        "border-blurred": "ansi_bright_black",
        "block-cursor-background": "ansi_blue",
        "block-cursor-foreground": "ansi_bright_white",
        "block-cursor-blurred-background": "ansi_bright_black",
        "footer-key-foreground": "ansi_cyan",
        "footer-background": "ansi_default",
        "input-selection-background": "ansi_blue",
        "scrollbar": "ansi_bright_black",
        "scrollbar-hover": "ansi_blue",
        "scrollbar-active": "ansi_blue",
        "scrollbar-background": "ansi_default",
    },
)

THEMES: tuple[Theme, ...] = (DARK, LIGHT, ANSI)
DEFAULT = DARK.name
