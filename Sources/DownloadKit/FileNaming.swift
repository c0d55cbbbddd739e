import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Safe file naming: turning server- or URL-proposed names into one harmless path component, naming files the
/// way YCDownloadManager does, and checking that a path stays inside a directory.
///
/// Decisions for hostile names (see docs/RESUME-INFO.md, "File naming"):
/// - Any directory part is dropped, splitting on both `/` and `\`: `../../etc/passwd` → `passwd`,
///   `..\..\win.ini` → `win.ini`, `/etc/shadow` → `shadow`.
/// - C0/C1 control characters (including NUL and DEL) and the bidirectional formatting characters (U+200E, U+200F,
///   U+061C, U+202A–U+202E, U+2066–U+2069) are removed: `a\u{0}b` → `ab`, and an RTL override cannot make
///   `invoice\u{202E}fdp.exe` display as `invoiceexe.pdf`.
/// - Leading dots and white space are removed (no hidden files: `.bashrc` → `bashrc`); trailing dots and white
///   space are removed; a name that is only dots and spaces, `.` or `..` yields `nil`.
/// - The result is NFC-normalised and at most 255 UTF-8 bytes, cut on a character boundary; a short extension
///   (≤ 16 bytes) is kept when the stem is shortened.
/// - Windows device names (`CON`, `NUL`, …) and characters such as `:` or `?` are legal on POSIX file systems and
///   are kept: DownloadKit writes to POSIX file systems only.
public enum FileNaming {
    /// The maximum length of a file name, in UTF-8 bytes (`NAME_MAX` on Linux file systems).
    public static let maxNameBytes = 255

    /// Turns a proposed name (from `Content-Disposition` or a URL path segment) into a safe single path component.
    /// - Parameter proposed: The untrusted name.
    /// - Returns: A non-empty name that is not `.` or `..`, contains no `/`, `\`, NUL or control characters, does
    ///   not start with a dot, and fits in ``maxNameBytes``; or `nil` if nothing usable remains.
    public static func sanitizedFileName(_ proposed: String) -> String? {
        // Split on the separator scalars themselves, not on `Character`s: the file system splits on the
        // byte `/`, and a `/` followed by a combining mark (or preceded by a prepended concatenation
        // mark such as U+0600) is one `Character` that is not equal to "/".
        var scalars = String.UnicodeScalarView()
        for scalar in proposed.unicodeScalars {
            if scalar == "/" || scalar == "\\" {
                scalars.removeAll()
            } else if !isRemoved(scalar) {
                scalars.append(scalar)
            }
        }
        var name = String(scalars).precomposedStringWithCanonicalMapping
        name = trimmed(name)
        guard !name.isEmpty else { return nil }
        if name.utf8.count > maxNameBytes { name = trimmed(truncated(name, toBytes: maxNameBytes)) }
        guard !name.isEmpty, name != ".", name != ".." else { return nil }
        return reservingWorkingSuffixes(name)
    }

    /// The suffixes of DownloadKit's working files (partials, resume records, journals, staging
    /// copies). A proposed name never ends up looking like another download's working file.
    public static let reservedSuffixes = [".dkpart", ".dkresume", ".dkjournal", ".dkmove-"]

    /// Replaces the dot that starts a reserved working-file suffix with `_`, wherever it occurs
    /// (case-insensitively): `x.dkpart` → `x_dkpart`, `a.dkresume.tmp-7` → `a_dkresume.tmp-7`.
    static func reservingWorkingSuffixes(_ name: String) -> String {
        var result = name
        for suffix in reservedSuffixes {
            while let range = result.range(of: suffix, options: .caseInsensitive) {
                result.replaceSubrange(range.lowerBound..<result.index(after: range.lowerBound), with: "_")
            }
        }
        return result
    }

    /// The names tried, in order, for a file that must not replace an existing one in a directory
    /// destination: `name`, then `stem (1).ext`, `stem (2).ext`, … up to `stem (99).ext`.
    public static func freeNameCandidates(for name: String) -> [String] {
        let dot = name.lastIndex(of: ".").flatMap { $0 == name.startIndex ? nil : $0 }
        let stem = dot.map { String(name[..<$0]) } ?? name
        let ext = dot.map { String(name[$0...]) } ?? ""
        return [name] + (1...99).map { "\(stem) (\($0))\(ext)" }
    }

    /// Names a download file the YCDownloadManager way: the file ID if one is given, otherwise the MD5 of the URL
    /// string, plus the URL's extension.
    /// - Parameters:
    ///   - url: The download URL as a string (the task's original URL, so redirects do not change the name).
    ///   - pathExtension: The URL path's extension without the dot, if any. Only ASCII letters and digits, at most
    ///     16 of them, are used; anything else is dropped rather than trusted.
    ///   - fileID: A caller-chosen identifier; sanitised with ``sanitizedFileName(_:)``.
    ///   - md5Hex: Computes the lowercase hex MD5 of a string (the engine passes OpenSSL's).
    /// - Returns: A safe file name, never empty.
    public static func fileName(
        forURL url: String,
        pathExtension: String?,
        fileID: String?,
        md5Hex: (String) -> String
    ) -> String {
        let base = fileID.flatMap(sanitizedFileName) ?? sanitizedFileName(md5Hex(url)) ?? "download"
        guard let pathExtension, !pathExtension.isEmpty, pathExtension.utf8.count <= 16,
            pathExtension.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0)) })
        else { return base }
        if base.lowercased().hasSuffix("." + pathExtension.lowercased()) { return base }
        let suffix = "." + pathExtension
        if base.utf8.count + suffix.utf8.count <= maxNameBytes { return base + suffix }
        return truncated(base, toBytes: maxNameBytes - suffix.utf8.count) + suffix
    }

    /// Whether `path` stays inside `directory` once resolved.
    ///
    /// A relative `path` is taken relative to the resolved `directory`. Any `..` component makes the answer `false` (it is
    /// never needed for a legitimate destination, and resolving it lexically would be wrong across symlinks).
    /// Symlinks are followed with `realpath(3)` on the directory and on the longest existing prefix of the path,
    /// so a symlink inside the directory that points outside it is caught.
    /// - Returns: `true` when the resolved path equals the directory or lies beneath it; `false` if the directory
    ///   does not exist, either string contains NUL, or the path escapes.
    public static func isContained(_ path: String, in directory: String) -> Bool {
        guard !path.isEmpty, !path.utf8.contains(0), !directory.utf8.contains(0),
            let root = realPath(directory)
        else { return false }
        let absolute = path.utf8.first == UInt8(ascii: "/") ? path : root + "/" + path
        // Components by bytes, as the kernel splits them (see sanitizedFileName for why not Characters).
        let components = absolute.utf8.split(separator: UInt8(ascii: "/")).map { String(decoding: $0, as: UTF8.self) }
        guard !components.contains(where: { $0.utf8.elementsEqual("..".utf8) }) else { return false }
        let cleaned = components.filter { !$0.utf8.elementsEqual(".".utf8) }

        // Resolve the longest prefix that exists; the rest does not exist yet, so it cannot be a symlink.
        var existingCount = cleaned.count
        var resolvedPrefix: String?
        while existingCount >= 0 {
            let prefix = "/" + cleaned.prefix(existingCount).joined(separator: "/")
            if let resolved = realPath(prefix) {
                resolvedPrefix = resolved
                break
            }
            existingCount -= 1
        }
        guard let resolvedPrefix else { return false }
        let remainder = cleaned.dropFirst(existingCount)
        let resolved = remainder.isEmpty
            ? resolvedPrefix
            : (resolvedPrefix == "/" ? "" : resolvedPrefix) + "/" + remainder.joined(separator: "/")
        // Byte comparisons: `String.hasPrefix` compares canonically equivalent spellings as equal.
        if resolved.utf8.elementsEqual(root.utf8) { return true }
        return resolved.utf8.starts(with: (root == "/" ? "/" : root + "/").utf8)
    }

    // MARK: - Helpers

    private static func isRemoved(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.properties.generalCategory == .control { return true }
        switch scalar.value {
        case 0x200E, 0x200F, 0x061C, 0x202A...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }

    /// Drops leading and trailing dots and white space, scalar by scalar (a leading "." followed by a
    /// combining mark is one `Character` that is not ".", yet the file system still sees a dot file).
    private static func trimmed(_ name: String) -> String {
        var scalars = Array(name.unicodeScalars)
        func isTrimmed(_ scalar: Unicode.Scalar) -> Bool { scalar == "." || scalar.properties.isWhitespace }
        while let first = scalars.first, isTrimmed(first) { scalars.removeFirst() }
        while let last = scalars.last, isTrimmed(last) { scalars.removeLast() }
        var view = String.UnicodeScalarView()
        view.append(contentsOf: scalars)
        return String(view)
    }

    /// Shortens `name` to at most `limit` UTF-8 bytes on a `Character` boundary, keeping a short extension.
    private static func truncated(_ name: String, toBytes limit: Int) -> String {
        guard name.utf8.count > limit else { return name }
        var stem = Substring(name)
        var suffix = ""
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            let candidate = name[dot...]
            if candidate.utf8.count <= 17, candidate.utf8.count < limit {
                suffix = String(candidate)
                stem = name[..<dot]
            }
        }
        let budget = limit - suffix.utf8.count
        var result = ""
        var used = 0
        for character in stem {
            let size = character.utf8.count
            if used + size > budget { break }
            result.append(character)
            used += size
        }
        return result + suffix
    }

    private static func realPath(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }
}
