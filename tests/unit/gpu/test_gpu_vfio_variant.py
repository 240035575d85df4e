"""The VFIO variant module for a GPU, from the host's modules.alias, as upstream picks it.

Covers: a modalias split into its seven fields; the `vfio_pci` aliases of a modules.alias
(other aliases and malformed lines skipped); the match with the fewest wildcards wins, the
first of equals; no match or no alias gives vfio-pci; a text that is no PCI modalias is a
ValueError naming it.
"""

from __future__ import annotations

import pytest

from core.gpu import vfio_variant

GH200 = "pci:v000010DEd00002342sv000010DEsd000016EBbc03sc02i00"
H100 = "pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00"
MODULES_ALIAS = """\
# Aliases extracted from modules themselves.
alias pci:v000010DEd*sv*sd*bc03sc*i* nvidia
alias vfio_pci:v000010DEd00002342sv*sd*bc*sc*i* nvgrace_gpu_vfio_pci
alias vfio_pci:v000010DEd*sv*sd*bc*sc*i* some_wide_vfio_pci
alias vfio_pci:v000010DEd00002342sv*sd*bc*sc*i* later_equal_vfio_pci
alias vfio_pci:not-a-modalias broken_vfio_pci
alias vfio_pci:v000010DEd00002342
"""


def test_a_modalias_splits_into_its_fields() -> None:
    assert vfio_variant.parse_modalias(GH200 + "\n") == vfio_variant.ModAlias(
        vendor="000010DE", device="00002342", subvendor="000010DE", subdevice="000016EB",
        base_class="03", subclass="02", interface="00",
    )


def test_only_parseable_vfio_pci_aliases_are_read() -> None:
    assert [m for _, m in vfio_variant.vfio_aliases(MODULES_ALIAS)] == [
        "nvgrace_gpu_vfio_pci", "some_wide_vfio_pci", "later_equal_vfio_pci",
    ]


@pytest.mark.parametrize(("modalias", "module"), [
    (GH200, "nvgrace_gpu_vfio_pci"),  # 5 wildcards beats 6; the first of equals wins
    (H100, "some_wide_vfio_pci"),
    ("pci:v00008086d00001234sv*sd*bc03sc00i00", "vfio-pci"),
])
def test_the_match_with_fewest_wildcards_wins(modalias: str, module: str) -> None:
    device = vfio_variant.parse_modalias(modalias)
    assert vfio_variant.best_module(device, vfio_variant.vfio_aliases(MODULES_ALIAS)) == module


def test_no_alias_at_all_gives_vfio_pci() -> None:
    device = vfio_variant.parse_modalias(GH200)
    assert vfio_variant.best_module(device, vfio_variant.vfio_aliases("")) == "vfio-pci"


@pytest.mark.parametrize("text", ["", "usb:v1D6Bp0002", "pci:x000010DE", "pci:v000010DEd0000"])
def test_a_text_that_is_no_pci_modalias_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"modalias|field"):
        vfio_variant.parse_modalias(text)
