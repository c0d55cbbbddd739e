#ifndef DK_TEST_SYSTEM_H
#define DK_TEST_SYSTEM_H

/// Moves the calling thread into the network namespace named by `path` (`/run/netns/NAME`, made by
/// `ip netns add NAME`): `setns(fd, CLONE_NEWNET)`. Sockets the thread opens afterwards, and threads it
/// starts, belong to that namespace. Returns 0, or -1 with errno set. For tests only.
int dk_test_enter_network_namespace(const char *path);

#endif
