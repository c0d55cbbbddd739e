import Foundation

/// Hides secrets given on the command line from other users: `ps`, `/proc/PID/cmdline` and
/// `/proc/PID/environ`-less tools read the process's argv memory, which this overwrites in place with
/// `*` (same length, so the other arguments stay where they are; aria2 shows `--rpc-secret=******`).
///
/// What is a secret is data (the option names below), not code: the decision is the pure
/// ``masked(_:)``, the effect ``maskProcessArguments()``. Masked:
/// - the whole value of ``secretOptions`` (`--rpc-secret`, `-u`/`--user`, `--proxy-user`,
///   `--key-passphrase`), as `--opt value`, `--opt=value` or `-uVALUE`;
/// - the value of a ``headerOptions`` argument (`--header 'Authorization: …'`) when the header is one of
///   ``secretHeaders``, and every `--credential-header` value;
/// - in every argument that holds `scheme://` (positional URLs, `--proxy`, `--store postgres://…`): the
///   userinfo password, every query value and the fragment (``maskedURL(_:)``).
///
/// The window before masking is the process's start-up (argv is read before any thread or socket
/// exists); a secret that must never be visible at all goes in a file or the environment
/// (docs/NETWORKING-AUTH.md).
///
/// Order matters: ArgumentParser parses a Swift copy (`CommandLine.arguments`, copied once), so the
/// caller takes that copy *before* masking and hands it to the parser (see ``DownloadKitCommand/main(named:)``).
enum ArgvMasking {
    /// Options whose whole value is a secret.
    static let secretOptions: Set<String> = ["--rpc-secret", "-u", "--user", "--proxy-user", "--key-passphrase"]
    /// Options whose value is a header `Name: value`.
    static let headerOptions: Set<String> = ["--header", "-H"]
    /// Options whose value is a header that carries a credential, whatever its name.
    static let credentialHeaderOptions: Set<String> = ["--credential-header"]
    /// Header names (lower-cased) whose value is a secret in ``headerOptions``.
    static let secretHeaders: Set<String> = ["authorization", "proxy-authorization", "cookie"]

    private static let star = UInt8(ascii: "*")

    /// The arguments (without the program name) as other users may see them: same count, each the same
    /// length in bytes, secret bytes replaced by `*`.
    static func masked(_ arguments: [[UInt8]]) -> [[UInt8]] {
        var result = arguments
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            result[index] = maskedURL(result[index])
            let name: [UInt8]
            var attached: Int?  // offset of a value attached to the option (`--opt=value`, `-uVALUE`)
            if let equals = argument.firstIndex(of: UInt8(ascii: "=")), argument.starts(with: Array("--".utf8)) {
                name = Array(argument[..<equals])
                attached = equals + 1
            } else if argument.count > 2, argument.starts(with: Array("-u".utf8)) {
                name = Array("-u".utf8)
                attached = 2
            } else {
                name = argument
            }
            let option = String(decoding: name, as: UTF8.self)
            guard secretOptions.contains(option) || headerOptions.contains(option) || credentialHeaderOptions.contains(option)
            else {
                index += 1
                continue
            }
            let valueIndex = attached == nil ? index + 1 : index
            guard valueIndex < arguments.count else { break }
            let start = attached ?? 0
            let value = Array(arguments[valueIndex][start...])
            let maskedValue: [UInt8]
            if secretOptions.contains(option) {
                maskedValue = value.map { _ in star }
            } else {
                maskedValue = maskedHeader(value, always: credentialHeaderOptions.contains(option))
            }
            result[valueIndex].replaceSubrange(start..., with: maskedValue)
            index = valueIndex + 1
        }
        return result
    }

    /// `Name: value` with the value masked when the name is a ``secretHeaders`` member (or `always`).
    private static func maskedHeader(_ header: [UInt8], always: Bool) -> [UInt8] {
        guard let colon = header.firstIndex(of: UInt8(ascii: ":")) else { return always ? header.map { _ in star } : header }
        let name = String(decoding: header[..<colon], as: UTF8.self).trimmingCharacters(in: .whitespaces).lowercased()
        guard always || secretHeaders.contains(name) else { return header }
        return Array(header[...colon]) + header[(colon + 1)...].map { $0 == UInt8(ascii: " ") ? $0 : star }
    }

    /// An argument with the secrets of a URL in it masked: after `scheme://`, the userinfo password
    /// (up to the authority's last `@`), every query value (`name=***`, a field without `=` whole) and
    /// the fragment. The same rule as ``HTTPURL/redacting(_:_:)``, byte for byte in place.
    static func maskedURL(_ argument: [UInt8]) -> [UInt8] {
        let separator = Array("://".utf8)
        guard let schemeEnd = argument.indices.first(where: { argument[$0...].starts(with: separator) }) else {
            return argument
        }
        var bytes = argument
        let authorityStart = schemeEnd + 3
        let authorityEnd = bytes[authorityStart...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }
            ?? bytes.endIndex
        if let at = bytes[authorityStart..<authorityEnd].lastIndex(of: UInt8(ascii: "@")),
            let colon = bytes[authorityStart..<at].firstIndex(of: UInt8(ascii: ":"))
        {
            for position in (colon + 1)..<at { bytes[position] = star }
        }
        let fragment = bytes[authorityEnd...].firstIndex(of: UInt8(ascii: "#")) ?? bytes.endIndex
        if let question = bytes[authorityEnd..<fragment].firstIndex(of: UInt8(ascii: "?")) {
            var fieldStart = question + 1
            while fieldStart < fragment {
                let fieldEnd = bytes[fieldStart..<fragment].firstIndex(of: UInt8(ascii: "&")) ?? fragment
                let valueStart = bytes[fieldStart..<fieldEnd].firstIndex(of: UInt8(ascii: "=")).map { $0 + 1 } ?? fieldStart
                for position in valueStart..<fieldEnd { bytes[position] = star }
                fieldStart = fieldEnd + 1
            }
        }
        if fragment < bytes.endIndex {
            for position in (fragment + 1)..<bytes.endIndex { bytes[position] = star }
        }
        return bytes
    }

    /// Overwrites the secrets in this process's argv memory (what `/proc/PID/cmdline` shows) in place.
    /// Call once at start-up, after taking the parser's copy of `CommandLine.arguments`.
    static func maskProcessArguments() {
        let count = Int(CommandLine.argc)
        guard count > 1 else { return }
        let argv = CommandLine.unsafeArgv
        var original: [[UInt8]] = []
        for index in 1..<count {
            guard let pointer = argv[index] else { return }
            original.append(Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer))))
        }
        for (offset, masked) in masked(original).enumerated() where masked != original[offset] {
            guard let pointer = argv[offset + 1], masked.count == original[offset].count else { continue }
            let bytes = UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: UInt8.self)
            for (position, byte) in masked.enumerated() { bytes[position] = byte }
        }
    }
}
