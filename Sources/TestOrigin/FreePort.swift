import Glibc

/// Loopback socket helpers: free ports for servers started out of process (nginx), listening sockets for
/// the in-process origin, and a connect probe used to wait until a server is up.
public enum FreePort {
    /// Picks `count` distinct TCP ports that are currently free on 127.0.0.1 (and on ::1 when this host
    /// has IPv6 loopback, so a server may listen on both and `localhost` works either way).
    ///
    /// The ports are found by binding to port 0 and reading back the kernel's choice, then releasing
    /// them. Another process could take one before the caller binds it; callers that start servers
    /// should treat a bind failure as retryable.
    public static func allocate(count: Int = 1) throws -> [Int] {
        var ports: [Int] = []
        var attempts = 0
        while ports.count < count {
            attempts += 1
            guard attempts <= 64 * count else { throw OriginError("finding a free loopback port") }
            let listener = try LoopbackListener(port: 0, backlog: 1)
            let port = listener.port
            var usable = !ports.contains(port)
            if usable && isIPv6LoopbackAvailable {
                // The same number must also be free on ::1.
                if let twin = try? LoopbackListener(port: port, backlog: 1, family: .ipv6) {
                    twin.close()
                } else {
                    usable = false
                }
            }
            listener.close()
            if usable { ports.append(port) }
        }
        return ports
    }

    /// Whether `::1` can be bound on this host (containers without IPv6 cannot).
    public static let isIPv6LoopbackAvailable: Bool = {
        guard let listener = try? LoopbackListener(port: 0, backlog: 1, family: .ipv6) else { return false }
        listener.close()
        return true
    }()

    /// Whether a TCP connection to `127.0.0.1:port` is accepted right now (connect, then close).
    public static func acceptsConnections(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var address = loopbackAddressV4(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        return result == 0
    }

    static func loopbackAddressV4(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port)).bigEndian
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        return address
    }
}

/// A listening TCP socket on a loopback address. Owned by one object; closed explicitly.
struct LoopbackListener {
    enum Family { case ipv4, ipv6 }

    let fd: Int32
    let port: Int

    /// Creates, binds and listens.
    ///
    /// - Parameters:
    ///   - port: The port, or 0 for an ephemeral port chosen by the kernel.
    ///   - backlog: The `listen(2)` backlog.
    ///   - family: 127.0.0.1 or ::1 (IPv6-only, so it never shadows the IPv4 socket).
    init(port: Int, backlog: Int32, family: Family = .ipv4) throws {
        let domain = family == .ipv4 ? AF_INET : AF_INET6
        let fd = socket(domain, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw OriginError.system("socket") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound: Int32
        switch family {
        case .ipv4:
            var address = FreePort.loopbackAddressV4(port: port)
            bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        case .ipv6:
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(port)).bigEndian
            address.sin6_addr = in6addr_loopback
            bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
        }
        guard bound == 0 else {
            let error = OriginError.system("bind")
            Glibc.close(fd)
            throw error
        }
        guard listen(fd, backlog) == 0 else {
            let error = OriginError.system("listen")
            Glibc.close(fd)
            throw error
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else {
            let error = OriginError.system("getsockname")
            Glibc.close(fd)
            throw error
        }
        let networkPort: in_port_t = withUnsafePointer(to: &storage) { pointer in
            switch family {
            case .ipv4: pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_port }
            case .ipv6: pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_port }
            }
        }
        self.fd = fd
        self.port = Int(UInt16(bigEndian: networkPort))
    }

    func close() { Glibc.close(fd) }
}
