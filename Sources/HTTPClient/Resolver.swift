import Glibc

/// Resolves host names to socket addresses with `getaddrinfo(3)`.
enum Resolver {
    /// Resolves `host` and `port` to stream-socket addresses (IPv4 and IPv6, `AF_UNSPEC`) in the
    /// order the system prefers (RFC 6724 via `/etc/gai.conf`).
    ///
    /// `getaddrinfo` has no timeout parameter; the call blocks for as long as the system resolver
    /// takes (bounded by `/etc/resolv.conf`'s `timeout`/`attempts`). The deadline is checked before
    /// and after.
    /// - Parameters:
    ///   - host: A DNS name or an IP literal (IPv6 literals may be bracketed).
    ///   - port: The TCP port, 0...65535.
    ///   - deadline: When to give up.
    /// - Returns: At least one address.
    /// - Throws: `.resolveFailed` (transient for `EAI_AGAIN`), or `.connectTimeout` when the deadline
    ///   passed.
    static func resolve(host: String, port: Int, deadline: Deadline) throws(TransportError) -> [SocketAddress] {
        let bare = IPAddressLiteral.unbracketed(host)
        guard !bare.isEmpty, !bare.utf8.contains(0) else {
            throw TransportError(.resolveFailed, operation: "getaddrinfo", detail: "the host name is empty or invalid")
        }
        guard (0...65535).contains(port) else {
            throw TransportError(.resolveFailed, operation: "getaddrinfo", detail: "port \(port) is out of range")
        }
        guard !deadline.hasPassed else {
            throw TransportError(
                .connectTimeout, operation: "getaddrinfo", detail: "the deadline passed before resolving \(bare)")
        }
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_TCP)
        // AI_NUMERICSERV: the port is a number. No AI_ADDRCONFIG: it hides "::1" for "localhost" in
        // containers without a global IPv6 address, and an address of an unconfigured family fails
        // at once with ENETUNREACH, after which the next address is tried.
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(bare, String(port), &hints, &list)
        guard status == 0, let first = list else {
            let systemError = status == EAI_SYSTEM ? DKErrno.current : nil
            let reason = systemError.map(\.description) ?? String(cString: gai_strerror(status))
            let detail = "could not resolve \(bare): \(reason)"
            if status == EAI_AGAIN {
                throw TransportError.transient(.resolveFailed, operation: "getaddrinfo", detail: detail)
            }
            throw TransportError(.resolveFailed, errorNumber: systemError, operation: "getaddrinfo", detail: detail)
        }
        defer { freeaddrinfo(first) }
        var addresses: [SocketAddress] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            if let address = entry.pointee.ai_addr,
                entry.pointee.ai_family == AF_INET || entry.pointee.ai_family == AF_INET6
            {
                let resolved = SocketAddress(address, length: entry.pointee.ai_addrlen)
                if !addresses.contains(resolved) { addresses.append(resolved) }
            }
            cursor = entry.pointee.ai_next
        }
        guard !addresses.isEmpty else {
            throw TransportError(
                .resolveFailed, operation: "getaddrinfo", detail: "\(bare) has no IPv4 or IPv6 address")
        }
        return addresses
    }
}
