"""Intel NPU4: a plan lowered to one OpenVINO IR graph (``graph``), its FP16 emulation for the
CPU stand-in (``f16``), the in-graph overflow and score guards (``guard``), the quiet OpenVINO
import (``quiet``) and the op versions the NPU compiler's frontend accepts (``compiler_ops``).

The modules are not imported here: ``graph`` loads OpenVINO (the ``vpu`` extra), and importing
``poot_codegen.intel`` must not."""
