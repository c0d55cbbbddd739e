/// A `NO_PROXY` list as curl reads it: hosts that are reached directly even when a proxy is set.
///
/// Entries are separated by commas (spaces around them are ignored). Rules, matching curl:
/// - `*` alone matches every host.
/// - A name matches itself and every sub-domain (`example.com` matches `example.com` and
///   `a.example.com`, never `badexample.com`); a leading dot is ignored (`.example.com` is the
///   same entry); comparison is case-insensitive and a trailing dot on either side is ignored.
/// - An IP address matches that address; `address/bits` (CIDR) matches a range, for IPv4 and IPv6.
///   IP entries match only IP-literal hosts: names are not resolved to decide.
/// - A `:port` suffix on a name or IPv4 entry is ignored, as curl ignores it.
///
/// Pure value, no resolving.
public struct NoProxyList: Sendable, Hashable, CustomStringConvertible {
    /// One parsed entry.
    public enum Entry: Sendable, Hashable {
        /// Matches every host.
        case any
        /// Matches the name and its sub-domains (lower-cased, without leading or trailing dots).
        case domain(String)
        /// Matches addresses whose first `prefixLength` bits equal `address`'s (4 or 16 bytes).
        case network(address: [UInt8], prefixLength: Int)
    }

    /// The entries in the order given; entries that parse as nothing (empty) are dropped.
    public var entries: [Entry]

    /// An empty list: no host bypasses the proxy.
    public init() { entries = [] }

    /// Parses a comma-separated list such as `"localhost,.internal.example,10.0.0.0/8,::1"`.
    /// Never fails: an entry that is neither a valid address nor a CIDR range is taken as a name.
    public init(_ text: String) {
        entries = []
        // Split on bytes, not Characters: a combining mark after a comma must not hide the comma.
        for raw in text.utf8.split(whereSeparator: { $0 == 0x2C || $0 == 0x20 || $0 == 0x09 }) {
            var token = String(decoding: raw, as: UTF8.self)
            if token == "*" {
                entries.append(.any)
                continue
            }
            if token.hasPrefix("[") , let close = token.firstIndex(of: "]") {
                // "[::1]" or "[::1]:8080"
                token = String(token[token.index(after: token.startIndex)..<close])
            }
            if let network = Self.parseNetwork(token) {
                entries.append(network)
                continue
            }
            // A name, possibly "name:port".
            if let colon = token.firstIndex(of: ":"), !token[token.index(after: colon)...].contains(":") {
                token = String(token[..<colon])
            }
            let name = Self.normalizedName(token)
            if name == "*" {
                entries.append(.any)  // "*:80"
            } else if let network = Self.parseNetwork(name) {
                entries.append(network)  // "10.0.0.1." is the address
            } else if !name.isEmpty, !name.contains(where: { $0 == ":" || $0 == "[" || $0 == "]" }) {
                entries.append(.domain(name))  // ":", "[" or "]" cannot be in a host name: dropped
            }
        }
    }

    /// Whether `host` (a name or IP literal, brackets allowed) should bypass the proxy.
    public func matches(host: String) -> Bool {
        var bare = host
        if bare.hasPrefix("["), bare.hasSuffix("]") { bare = String(bare.dropFirst().dropLast()) }
        let address = IPAddressText.parse(bare)
        let name = Self.normalizedName(bare)
        for entry in entries {
            switch entry {
            case .any:
                return true
            case .domain(let domain):
                if address == nil || domain == name {
                    if name == domain || name.hasSuffix("." + domain) { return true }
                }
            case .network(let network, let prefixLength):
                if let address, address.count == network.count,
                    Self.prefixEqual(address, network, bits: prefixLength)
                {
                    return true
                }
            }
        }
        return false
    }

    /// The list written back as text.
    public var description: String {
        entries.map { entry in
            switch entry {
            case .any: return "*"
            case .domain(let name): return name
            case .network(let address, let bits):
                let text = IPAddressText.format(address)
                return bits == address.count * 8 ? text : "\(text)/\(bits)"
            }
        }.joined(separator: ",")
    }

    private static func normalizedName(_ text: String) -> String {
        var name = Substring(text.lowercased())
        while name.hasPrefix(".") { name = name.dropFirst() }
        while name.hasSuffix(".") { name = name.dropLast() }
        return String(name)
    }

    private static func parseNetwork(_ token: String) -> Entry? {
        var addressText = Substring(token)
        var bits: Int?
        if let slash = token.firstIndex(of: "/") {
            addressText = token[..<slash]
            guard let value = Int(token[token.index(after: slash)...]) else { return nil }
            bits = value
        } else if let colon = token.firstIndex(of: ":"), !token[token.index(after: colon)...].contains(":"),
            IPAddressText.parse(String(token[..<colon]))?.count == 4
        {
            addressText = token[..<colon]  // "10.0.0.1:8080": the port is ignored
        }
        guard let address = IPAddressText.parse(String(addressText)) else { return nil }
        let maximum = address.count * 8
        let prefix = bits ?? maximum
        guard (0...maximum).contains(prefix) else { return nil }
        return .network(address: address, prefixLength: prefix)
    }

    private static func prefixEqual(_ a: [UInt8], _ b: [UInt8], bits: Int) -> Bool {
        var left = bits
        for index in a.indices where left > 0 {
            let take = min(8, left)
            let mask: UInt8 = take == 8 ? 0xFF : ~(0xFF >> UInt8(take))
            if a[index] & mask != b[index] & mask { return false }
            left -= take
        }
        return true
    }
}

/// IPv4 and IPv6 address text to bytes and back, in pure Swift (no `inet_pton`), for the proxy
/// grammars.
public enum IPAddressText {
    /// Parses dotted-decimal IPv4 (4 bytes) or RFC 4291 IPv6 text with `::` and an embedded IPv4
    /// tail (16 bytes). A zone (`%eth0`) is ignored. Returns `nil` for anything else.
    public static func parse(_ text: String) -> [UInt8]? {
        var text = Substring(text)
        if let percent = text.firstIndex(of: "%") { text = text[..<percent] }
        if !text.contains(":") { return parseIPv4(text) }
        return parseIPv6(text)
    }

    /// Formats 4 bytes as dotted decimal or 16 bytes as IPv6 text (RFC 5952: lower case, the longest
    /// run of two or more zero groups as `::`).
    public static func format(_ bytes: [UInt8]) -> String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        guard bytes.count == 16 else { return "" }
        let groups = (0..<8).map { Int(bytes[2 * $0]) << 8 | Int(bytes[2 * $0 + 1]) }
        var bestStart = -1, bestLength = 0, index = 0
        while index < 8 {
            if groups[index] == 0 {
                var end = index
                while end < 8 && groups[end] == 0 { end += 1 }
                if end - index > bestLength && end - index >= 2 { (bestStart, bestLength) = (index, end - index) }
                index = end
            } else {
                index += 1
            }
        }
        func hex(_ range: Range<Int>) -> String { range.map { String(groups[$0], radix: 16) }.joined(separator: ":") }
        if bestStart < 0 { return hex(0..<8) }
        return hex(0..<bestStart) + "::" + hex((bestStart + bestLength)..<8)
    }

    private static func parseIPv4(_ text: Substring) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard !part.isEmpty, part.count <= 3, part.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let value = Int(part), value <= 255
            else { return nil }
            bytes.append(UInt8(value))
        }
        return bytes
    }

    private static func parseIPv6(_ text: Substring) -> [UInt8]? {
        // Split at the one "::" allowed (stdlib only: no Foundation here).
        var halves: [Substring] = [text]
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(after: index)
            if text[index] == ":", next < text.endIndex, text[next] == ":" {
                halves = [text[..<index], text[text.index(after: next)...]]
                break
            }
            index = next
        }
        if halves.count == 2 && halves[1].contains("::") { return nil }
        func groups(_ part: Substring, allowIPv4Tail: Bool) -> [UInt8]? {
            if part.isEmpty { return [] }
            var bytes: [UInt8] = []
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            for (index, piece) in pieces.enumerated() {
                if allowIPv4Tail && index == pieces.count - 1 && piece.contains(".") {
                    guard let v4 = parseIPv4(piece) else { return nil }
                    bytes += v4
                    continue
                }
                guard (1...4).contains(piece.count), let value = UInt16(piece, radix: 16) else { return nil }
                bytes += [UInt8(value >> 8), UInt8(value & 0xFF)]
            }
            return bytes
        }
        if halves.count == 1 {
            guard let bytes = groups(text, allowIPv4Tail: true), bytes.count == 16 else { return nil }
            return bytes
        }
        guard let head = groups(halves[0], allowIPv4Tail: false),
            let tail = groups(halves[1], allowIPv4Tail: true), head.count + tail.count <= 14
        else { return nil }
        return head + [UInt8](repeating: 0, count: 16 - head.count - tail.count) + tail
    }
}
