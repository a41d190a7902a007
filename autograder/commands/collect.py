"""nbgrader's collect for the course (`c.ExchangeFactory.collect`, set by nbgrader_plugin.configure): a symbolic link
in a student's inbound submission is copied as a link, never as what it points to, so that the grader refuses it
(foundation/readfile.py: a link out of the submission's folder is not read)."""
from __future__ import annotations

import contextlib
import os
import shutil

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import ignore_patterns


class LinkKeepingCollect(ExchangeCollect):
    """nbgrader's collect, copying a symbolic link in a student's inbound submission as a link (stock collect
    copies what it points to: the instructor's source/, another student's work), which the grader then refuses;
    a submission whose inbound folder is itself a link is not collected."""

    def do_copy(self, src, dest, log=None):
        if os.path.islink(src):
            self.log.error("autograder: %s is a symbolic link (to %s), not a submission: not collected", src,
                           os.readlink(src))
            return
        if self.get_size(src) > 1000 * self.coursedir.max_dir_size:
            self.log.error("Directory size is too big")
            raise RuntimeError(f"Directory size is too big: {src}")
        shutil.copytree(src, dest, symlinks=True, ignore=ignore_patterns(
            exclude=self.coursedir.ignore, include=self.coursedir.include, max_file_size=self.coursedir.max_file_size,
            log=self.log))
        links = [os.path.join(d, n) for d, dirs, files in os.walk(dest) for n in dirs + files
                 if os.path.islink(os.path.join(d, n))]
        for link in links:
            self.log.warning("autograder: %s is a symbolic link (to %s): collected as a link, the grader refuses it",
                             link, os.readlink(link))
        if self.coursedir.groupshared:
            for dirname, _dirs, filenames in os.walk(dest):
                for path in [dirname] + [os.path.join(dirname, f) for f in filenames]:
                    if not os.path.islink(path):
                        want = 0o2770 if os.path.isdir(path) else 0o660
                        with contextlib.suppress(PermissionError):
                            os.chmod(path, (os.stat(path).st_mode | want) & 0o2777)
