import Glibc

/// An IPv4 or IPv6 socket address (a `sockaddr_storage` plus its length), as returned by the
/// resolver and passed to `connect(2)`.
struct SocketAddress: Sendable, Hashable, CustomStringConvertible {
    /// The address family: `AF_INET` or `AF_INET6`.
    let family: Int32
    /// The C address (`sockaddr_in` or `sockaddr_in6` inside), `length` bytes of it significant.
    private var storage = sockaddr_storage()
    /// The length to pass to `connect(2)`.
    let length: socklen_t

    /// Copies `length` bytes of a C socket address.
    init(_ address: UnsafePointer<sockaddr>, length: socklen_t) {
        self.family = Int32(address.pointee.sa_family)
        let count = min(Int(length), MemoryLayout<sockaddr_storage>.size)
        self.length = socklen_t(count)
        withUnsafeMutableBytes(of: &storage) { raw in
            raw.copyMemory(from: UnsafeRawBufferPointer(start: address, count: count))
        }
    }

    /// Calls `body` with a pointer to the C address and its length.
    func withSockAddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        withUnsafePointer(to: storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }

    /// The significant bytes of the C address.
    private var bytes: [UInt8] {
        withUnsafeBytes(of: storage) { Array($0.prefix(Int(length))) }
    }

    static func == (lhs: SocketAddress, rhs: SocketAddress) -> Bool { lhs.bytes == rhs.bytes }

    func hash(into hasher: inout Hasher) { hasher.combine(bytes) }

    /// The IP address as text ("127.0.0.1", "::1"), without the port. Wraps `inet_ntop`.
    var ipAddress: String {
        withSockAddr { address, _ in
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            let result: UnsafePointer<CChar>?
            switch family {
            case AF_INET:
                result = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { inet in
                    var raw = inet.pointee.sin_addr
                    return inet_ntop(AF_INET, &raw, &text, socklen_t(text.count))
                }
            case AF_INET6:
                result = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { inet6 in
                    var raw = inet6.pointee.sin6_addr
                    return inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count))
                }
            default:
                result = nil
            }
            guard result != nil else { return "<family \(family)>" }
            let utf8 = text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
            return String(decoding: utf8, as: UTF8.self)
        }
    }

    /// The port in host byte order.
    var port: Int {
        withSockAddr { address, _ in
            switch family {
            case AF_INET:
                return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    Int(UInt16(bigEndian: $0.pointee.sin_port))
                }
            case AF_INET6:
                return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    Int(UInt16(bigEndian: $0.pointee.sin6_port))
                }
            default:
                return 0
            }
        }
    }

    /// "127.0.0.1:80" or "[::1]:80".
    var description: String {
        family == AF_INET6 ? "[\(ipAddress)]:\(port)" : "\(ipAddress):\(port)"
    }
}

/// Helpers for IP address literals in host names.
enum IPAddressLiteral {
    /// Removes the square brackets of an IPv6 literal as written in URLs ("[::1]" → "::1").
    static func unbracketed(_ host: String) -> String {
        if host.hasPrefix("["), host.hasSuffix("]"), host.count >= 2 {
            return String(host.dropFirst().dropLast())
        }
        return host
    }

    /// Whether `host` (brackets allowed) is an IPv4 or IPv6 address literal rather than a DNS name.
    /// Such hosts get no SNI (RFC 6066 §3) and are verified against the certificate's IP entries.
    static func isLiteral(_ host: String) -> Bool {
        let bare = unbracketed(host)
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, bare, &v4) == 1 || inet_pton(AF_INET6, bare, &v6) == 1
    }
}
