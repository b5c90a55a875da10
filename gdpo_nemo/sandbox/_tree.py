"""Emptying a directory that a program filled: any depth, no recursion, no long paths.

Used by the harness (the rlimits backend's working directory) and, prepended to the
driver's source (`runner.DRIVER_SOURCE`), by the driver inside the sandbox (its /tmp between
cases and programs). So it runs on any CPython >= 3.8 with `posix` alone.

A program may nest directories deeper than Python's recursion limit and than PATH_MAX (a
path of 3000 levels is longer than the kernel accepts), take away its own permissions, and
leave symlinks. The walk therefore holds one directory descriptor at a time, opens each
child relative to it (O_NOFOLLOW), climbs back through "..", and gives each directory
back the permissions it needs before reading it.
"""

import posix

_DIRECTORY_FLAGS = posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | getattr(posix, "O_CLOEXEC", 0)


def empty_directory(path):
    """Remove everything inside `path` (not `path` itself); True if nothing is left."""
    try:
        fd = posix.open(path, _DIRECTORY_FLAGS)
    except OSError:
        return False
    names = []  # the directories between `path` and the current one
    stuck = [set()]  # per level: children that could not be removed (never entered again)
    try:
        while True:
            try:
                posix.fchmod(fd, 0o700)  # a program may have taken away its own permissions
            except OSError:
                pass
            child = None
            try:
                with posix.scandir(fd) as entries:
                    for entry in entries:
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                if entry.name not in stuck[-1] and child is None:
                                    child = entry.name
                            else:
                                posix.unlink(entry.name, dir_fd=fd)
                        except OSError:
                            pass
            except OSError:
                pass
            if child is not None:
                try:
                    try:
                        posix.chmod(child, 0o700, dir_fd=fd)
                    except OSError:
                        pass
                    inner = posix.open(child, _DIRECTORY_FLAGS, dir_fd=fd)
                except OSError:
                    stuck[-1].add(child)
                    continue
                posix.close(fd)
                fd = inner
                names.append(child)
                stuck.append(set())
                continue
            if not names:
                break
            parent = posix.open("..", _DIRECTORY_FLAGS, dir_fd=fd)
            posix.close(fd)
            fd = parent
            stuck.pop()
            name = names.pop()
            try:
                posix.rmdir(name, dir_fd=fd)
            except OSError:
                stuck[-1].add(name)
        with posix.scandir(fd) as entries:
            return next(iter(entries), None) is None
    except OSError:
        return False
    finally:
        posix.close(fd)
