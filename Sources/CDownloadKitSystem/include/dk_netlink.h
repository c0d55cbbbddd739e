#ifndef DK_NETLINK_H
#define DK_NETLINK_H

/// One network link as the kernel's routing netlink describes it (`RTM_NEWLINK`).
typedef struct {
    /// The link's name (`IFLA_IFNAME`), NUL-terminated.
    char name[16];
    /// `ifi_type`: an ARPHRD_* value (772 is loopback).
    unsigned short type;
    /// `IFLA_OPERSTATE` (RFC 2863: 0 unknown, 2 down, 3 lower layer down, 5 dormant, 6 up), 0 when absent.
    unsigned char operstate;
    /// `IFLA_CARRIER`: 1 or 0, or -1 when absent.
    signed char carrier;
    /// `ifi_flags` (IFF_UP, IFF_LOWER_UP, …).
    unsigned int flags;
} dk_link;

/// Opens a routing netlink socket (close-on-exec) subscribed to link and address changes
/// (`RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR`) of the calling thread's network namespace.
/// Returns the descriptor, or -1 with errno set.
int dk_netlink_subscribe(void);

/// Lists the links of the calling thread's network namespace (an `RTM_GETLINK` dump on a socket of its
/// own). Fills at most `capacity` entries and returns how many links there are (which may exceed
/// `capacity`: call again with more room), or -1 with errno set.
int dk_netlink_links(dk_link *links, int capacity);

/// Waits until the subscription `fd` has messages or `wake_fd` is readable, and reads (discards) every
/// message pending on `fd`. Returns 1 when link or address messages arrived (or the kernel dropped
/// some: ENOBUFS means "state changed, read it again"), 0 when `wake_fd` became readable, -1 with errno
/// set on any other failure. EINTR is retried here.
int dk_netlink_wait(int fd, int wake_fd);

#endif
