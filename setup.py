"""Build hooks that ``setup.cfg`` cannot express: the startup ``.pth`` file in ``site-packages``.

``connector/_pyspark_kafka_startup.pth`` is copied to the root of the wheel (``build_py``) and of
the editable wheel (``editable_wheel``), so ``pip install`` and ``pip install -e`` both place it in
``site-packages``; ``pip uninstall`` removes it. What it does: ``pyspark_kafka.worker_daemon.startup_hook``.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "_pyspark_kafka_startup.pth"
SOURCE = os.path.join("connector", PTH)


class BuildPyWithPth(build_py):
    """``build_py`` that also puts :data:`PTH` at the root of the build (and so of the wheel)."""

    def run(self):
        super().run()
        self.copy_file(SOURCE, os.path.join(self.build_lib, PTH), preserve_mode=0)


cmdclass = {"build_py": BuildPyWithPth}

try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:  # setuptools < 64: no PEP 660 editable installs
    editable_wheel = None

if editable_wheel is not None and hasattr(editable_wheel, "_install_namespaces"):

    class EditableWheelWithPth(editable_wheel):
        """``editable_wheel`` that also puts :data:`PTH` into the editable wheel's root. Uses the
        directory setuptools writes the wheel's extra files to; on a setuptools without that step
        the editable install simply has no ``.pth`` (the package works the same, its Python
        processes compile pyspark's zip as without it)."""

        def _install_namespaces(self, installation_dir, pth_prefix):
            super()._install_namespaces(installation_dir, pth_prefix)
            shutil.copyfile(SOURCE, os.path.join(installation_dir, PTH))

    cmdclass["editable_wheel"] = EditableWheelWithPth

setup(cmdclass=cmdclass)
