#define _GNU_SOURCE
#include "dk_netlink.h"

#include <errno.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/if_link.h>

int dk_netlink_subscribe(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct sockaddr_nl address = {.nl_family = AF_NETLINK,
                                  .nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR};
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

static void describe(struct nlmsghdr *message, dk_link *link) {
    struct ifinfomsg *info = NLMSG_DATA(message);
    memset(link, 0, sizeof(*link));
    link->type = info->ifi_type;
    link->flags = info->ifi_flags;
    link->carrier = -1;
    int length = (int)IFLA_PAYLOAD(message);
    for (struct rtattr *attribute = IFLA_RTA(info); RTA_OK(attribute, length);
         attribute = RTA_NEXT(attribute, length)) {
        size_t size = RTA_PAYLOAD(attribute);
        switch (attribute->rta_type) {
        case IFLA_IFNAME:
            if (size > sizeof(link->name) - 1) size = sizeof(link->name) - 1;
            memcpy(link->name, RTA_DATA(attribute), size);
            link->name[size] = 0;
            break;
        case IFLA_OPERSTATE:
            if (size >= 1) link->operstate = *(unsigned char *)RTA_DATA(attribute);
            break;
        case IFLA_CARRIER:
            if (size >= 1) link->carrier = (signed char)(*(unsigned char *)RTA_DATA(attribute) ? 1 : 0);
            break;
        }
    }
}

int dk_netlink_links(dk_link *links, int capacity) {
    // Large enough for one datagram of a dump (the kernel sizes them to the page, at most 32 KiB). On the heap:
    // a thread-local array would add its size to every thread of the process (static TLS is set up, and
    // zeroed, for each one).
    enum { buffer_size = 65536 };
    char *buffer = NULL;
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct {
        struct nlmsghdr header;
        struct ifinfomsg info;
    } request = {
        .header = {.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg)), .nlmsg_type = RTM_GETLINK,
                   .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1},
        .info = {.ifi_family = AF_UNSPEC},
    };
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    ssize_t sent;
    do {
        sent = sendto(fd, &request, request.header.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel));
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) goto failed;
    int count = 0;
    buffer = malloc(buffer_size);
    if (buffer == NULL) goto failed;
    for (;;) {
        ssize_t received;
        do {
            received = recv(fd, buffer, buffer_size, 0);
        } while (received < 0 && errno == EINTR);
        if (received < 0) goto failed;
        if (received == 0) {
            errno = EPROTO;
            goto failed;
        }
        int remaining = (int)received;
        for (struct nlmsghdr *message = (struct nlmsghdr *)buffer; NLMSG_OK(message, remaining);
             message = NLMSG_NEXT(message, remaining)) {
            if (message->nlmsg_type == NLMSG_DONE) {
                free(buffer);
                close(fd);
                return count;
            }
            if (message->nlmsg_type == NLMSG_ERROR) {
                struct nlmsgerr *error = NLMSG_DATA(message);
                errno = error->error < 0 ? -error->error : EPROTO;
                goto failed;
            }
            if (message->nlmsg_type != RTM_NEWLINK) continue;
            if (count < capacity) describe(message, &links[count]);
            count += 1;
        }
    }
failed : {
    int saved = errno;
    free(buffer);
    close(fd);
    errno = saved;
    return -1;
}
}

int dk_netlink_wait(int fd, int wake_fd) {
    struct pollfd watched[2] = {{.fd = fd, .events = POLLIN}, {.fd = wake_fd, .events = POLLIN}};
    for (;;) {
        int ready = poll(watched, 2, -1);
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) return -1;
        if (watched[1].revents != 0) return 0;
        if (watched[0].revents & (POLLERR | POLLNVAL)) {
            errno = EIO;
            return -1;
        }
        if (watched[0].revents == 0) continue;
        break;
    }
    // Drain: one state read answers every message that arrived together (their contents are not needed:
    // MSG_TRUNC discards each datagram whole into a one-byte buffer).
    char discard;
    for (;;) {
        ssize_t received = recv(fd, &discard, sizeof(discard), MSG_DONTWAIT | MSG_TRUNC);
        if (received > 0) continue;
        if (received < 0 && errno == EINTR) continue;
        if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
        // The kernel dropped messages for this socket: the state changed in ways we no longer know.
        if (received < 0 && errno == ENOBUFS) continue;
        if (received < 0) return -1;
        errno = EPROTO;  // a netlink socket does not reach end of file
        return -1;
    }
}
