/* A preload library for commands under gVisor (runsc): strips AT_NO_AUTOMOUNT from statx().
 *
 * Debian's runsc (0.0~20221219) answers statx and fstatat with EINVAL when AT_NO_AUTOMOUNT is set, and coreutils
 * (9.1) sets it on every `ls PATH`, `ls -l` and `stat`. There is nothing to automount inside a session container,
 * so dropping the flag changes no result. Built as a shared object (not part of the agent) and named in the session
 * container's LD_PRELOAD only under runsc; a static or non-glibc program simply does not load it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *restrict path, int flags, unsigned int mask, struct statx *restrict buf)
{
    return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}
