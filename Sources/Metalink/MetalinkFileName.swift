/// The rule a Metalink file name must meet: a relative path (RFC 5854 §4.1.2.1 allows directories) whose every
/// component is one that DownloadKit's `FileNaming.sanitizedFileName` would keep as it is, apart from Unicode
/// normalisation (which needs Foundation; this target is standard library only).
///
/// A name that breaks the rule is refused, not rewritten: a Metalink names several files, and a rewritten name
/// could collide with another file's. `FileNaming` (in the DownloadKit target, which needs Foundation and the
/// engine) cannot be reached from here, so the rule is written once here, and the `metalink` fuzz target
/// (Fuzz/FuzzMetalink.swift, where both are compiled into one module) checks every accepted component against
/// `FileNaming.sanitizedFileName` and ``reservedSuffixes`` against `FileNaming.reservedSuffixes`.
public enum MetalinkFileName {
    /// The maximum length of one path component, in UTF-8 bytes (`NAME_MAX`).
    public static let maxComponentBytes = 255
    /// The maximum length of the whole name, in UTF-8 bytes (`PATH_MAX` less its NUL).
    public static let maxPathBytes = 4095
    /// The suffixes of DownloadKit's working files (`FileNaming.reservedSuffixes`): a component holding one
    /// (ASCII case-insensitively) could pass for another download's partial or resume record.
    public static let reservedSuffixes = [".dkpart", ".dkresume", ".dkjournal", ".dkmove-"]

    /// Why `name` is not a safe relative path, or `nil` when it is.
    ///
    /// Refused: an empty name; an absolute path; a backslash (a separator elsewhere); NUL; an empty, `.` or `..`
    /// component; a component starting with a dot (hidden, or `..` traversal), starting or ending with white
    /// space, or ending with a dot; C0/C1 control and bidirectional formatting characters (U+200E, U+200F,
    /// U+061C, U+202A–U+202E, U+2066–U+2069: an RTL override could make `x\u{202E}fdp.exe` read as `xexe.pdf`);
    /// a component over ``maxComponentBytes`` or a name over ``maxPathBytes``; a reserved working-file suffix.
    public static func problem(in name: String) -> String? {
        let bytes = Array(name.utf8)
        if bytes.isEmpty { return "the name is empty" }
        if bytes.count > maxPathBytes { return "the name has \(bytes.count) bytes, more than \(maxPathBytes)" }
        if bytes[0] == 0x2F { return "the name is an absolute path" }
        if bytes.contains(0) { return "the name holds a NUL byte" }
        if bytes.contains(0x5C) { return "the name holds a backslash" }
        for component in bytes.split(separator: 0x2F, omittingEmptySubsequences: false) {
            if let problem = componentProblem(String(decoding: component, as: UTF8.self)) { return problem }
        }
        return nil
    }

    private static func componentProblem(_ component: String) -> String? {
        let bytes = Array(component.utf8)
        if bytes.isEmpty { return "the name has an empty path component" }
        if bytes == [0x2E, 0x2E] { return "the name has a '..' component (directory traversal)" }
        if bytes == [0x2E] { return "the name has a '.' component" }
        if bytes.count > maxComponentBytes {
            return "a path component has \(bytes.count) bytes, more than \(maxComponentBytes)"
        }
        let scalars = Array(component.unicodeScalars)
        if let bad = scalars.first(where: isRefused) {
            return
                "the name holds U+\(String(bad.value, radix: 16, uppercase: true)), a control or bidirectional formatting character"
        }
        if bytes[0] == 0x2E { return "a path component starts with '.' (a hidden file)" }
        if let first = scalars.first, first.properties.isWhitespace {
            return "a path component starts with white space"
        }
        if let last = scalars.last, last.properties.isWhitespace || last == "." {
            return "a path component ends with white space or '.'"
        }
        let lowered = bytes.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }
        for suffix in reservedSuffixes where contains(lowered, Array(suffix.utf8)) {
            return "a path component holds '\(suffix)', the suffix of DownloadKit's working files"
        }
        return nil
    }

    private static func isRefused(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.properties.generalCategory == .control { return true }
        switch scalar.value {
        case 0x200E, 0x200F, 0x061C, 0x202A...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }

    private static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains { start in
            haystack[start..<(start + needle.count)].elementsEqual(needle)
        }
    }
}
