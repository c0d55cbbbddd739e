import CDownloadKitSystem
import DownloadKitDecisions
import Foundation
import Glibc
import HTTPClient
import HTTPWire

/// What a download does when its destination file already exists (complete, with no partial data
/// beside it) — curl's `--no-clobber` and wget's `-N`, decided before any byte is written.
public enum ExistingFilePolicy: Sendable, Hashable {
    /// Download again and replace it when the new file is complete and verified (the default).
    case replace
    /// Keep it and send no request (`--no-clobber`).
    case keep
    /// Ask the server with `If-None-Match` (the validator recorded when the file was downloaded) and
    /// `If-Modified-Since` (the recorded `Last-Modified`, else the file's mtime) on the download's first
    /// request; a `304` keeps the file, any other answer is the download itself — a changed file's `200`
    /// is the new version, so it costs one request (`--if-modified`, like curl `-z` and wget `-N`).
    case keepIfNotModified
}

/// The validators of a finished file, kept in one extended attribute (`user.downloadkit.validators`) so
/// that a later conditional download can ask "has it changed?" after the resume info is gone, with the
/// URL it came from (no userinfo) so that a manager that died between the final rename and its task row's
/// update recognises the file as the task's. Written on the partial before its rename. Best effort: file
/// systems without user xattrs fall back to the mtime (and such a manager downloads the file again).
///
/// The value is text: a version line `1`, then the entity tag, the `Last-Modified` date and the URL, one
/// per line (an empty line for one the response did not have); none of them can hold a line break (the
/// response parser refuses control bytes in fields, and URLs percent-encode them). One attribute, not
/// three: on ext4 only the first small one fits inside the inode, and each later `fsetxattr` rewrote the
/// external block — files that share their `ETag` and `Last-Modified` (same size and mtime on nginx) then
/// shared that block part-way and freed their own copy, a block allocated, freed and (on a `discard`
/// mount) discarded per file (docs/BENCHMARKS.md, "Small files: received in place, one attribute").
///
/// Files finished by earlier versions carry three attributes instead (`user.downloadkit.etag`,
/// `user.downloadkit.last-modified`, `user.downloadkit.url`); they are read when the new one is absent.
package enum FinishedFileValidators {
    static let attribute = "user.downloadkit.validators"
    static let version = "1"
    static let legacyEntityTagAttribute = "user.downloadkit.etag"
    static let legacyLastModifiedAttribute = "user.downloadkit.last-modified"
    static let legacyURLAttribute = "user.downloadkit.url"

    /// The fields a finished file records (nil for one it does not have).
    package struct Values: Equatable, Sendable {
        package var entityTag: String?
        package var lastModified: String?
        package var url: String?
    }

    static func record(entityTag: String?, lastModified: String?, url: String, fd: Int32) {
        let bytes = Array(encode(Values(entityTag: entityTag, lastModified: lastModified, url: url)).utf8)
        _ = bytes.withUnsafeBytes { dk_fsetxattr(fd, attribute, $0.baseAddress, $0.count) }
    }

    /// The attribute's text. A value with a line break could not be told apart from the next field: it is
    /// left out (the engine never has one, see above).
    static func encode(_ values: Values) -> String {
        func field(_ value: String?) -> String {
            guard let value, !value.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D }) else { return "" }
            return value
        }
        return [version, field(values.entityTag), field(values.lastModified), field(values.url)].joined(separator: "\n")
    }

    /// The fields of an attribute's text; nil for another version or shape (treated as no validators).
    static func decode(_ text: String) -> Values? {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count == 4, lines[0] == version[...] else { return nil }
        func field(_ line: Substring) -> String? { line.isEmpty ? nil : String(line) }
        return Values(entityTag: field(lines[1]), lastModified: field(lines[2]), url: field(lines[3]))
    }

    package static func read(at path: String) -> (entityTag: String?, lastModified: String?) {
        let values = values(at: path)
        return (values?.entityTag, values?.lastModified)
    }

    /// The URL recorded on a finished file (without userinfo), or nil.
    package static func recordedURL(at path: String) -> String? { values(at: path)?.url }

    /// The file's validators: the attribute when it is there (a malformed one gives none), else the three
    /// attributes of earlier versions.
    /// Opened without blocking: the caller's `lstat` saw a regular file, but what is at `path` by the time it
    /// is opened may be a FIFO another user put there, whose open would wait for a writer forever.
    static func values(at path: String) -> Values? {
        let fd = retryingInterrupts { open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) }.result
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        switch value(of: attribute, fd: fd, lineBreaks: true) {
        case .text(let text): return decode(text) ?? Values()
        case .refused: return Values()
        case .absent: break
        }
        func legacy(_ name: String) -> String? {
            if case .text(let text) = value(of: name, fd: fd, lineBreaks: false), !text.isEmpty { return text }
            return nil
        }
        let values = Values(
            entityTag: legacy(legacyEntityTagAttribute), lastModified: legacy(legacyLastModifiedAttribute),
            url: legacy(legacyURLAttribute))
        return values == Values() ? nil : values
    }

    private enum Value {
        case absent
        /// There, but not text we wrote.
        case refused
        case text(String)
    }

    /// An attribute's value. Line breaks are allowed only where they separate fields.
    private static func value(of name: String, fd: Int32, lineBreaks: Bool) -> Value {
        var buffer = [UInt8](repeating: 0, count: 8192)
        let count = buffer.withUnsafeMutableBytes { dk_fgetxattr(fd, name, $0.baseAddress, $0.count) }
        // ERANGE: larger than any value of ours.
        guard count >= 0 else { return errno == ERANGE ? .refused : .absent }
        // A value with other control bytes is not ours (or was tampered with): never put it in a header.
        // A tab is legal in a field value (RFC 9110 §5.5).
        guard let text = String(validating: buffer[0..<count], as: UTF8.self),
            text.unicodeScalars.allSatisfy({
                ($0.value >= 0x20 && $0.value < 0x7F) || $0 == "\t" || (lineBreaks && $0 == "\n")
            })
        else { return .refused }
        return .text(text)
    }
}

extension ExistingFileRule.Found {
    /// What is at the file destination `path` (nil: nothing), and whether the download's partial `partial`
    /// is beside it: I/O at the edge, for the download machine's `existingDestination(_:policy:)`. `lstat`
    /// (a symlink is no regular file), its owner, mtime and size, and — for a regular file only (anything
    /// else is never opened: a FIFO would block) — the validators recorded on it (``FinishedFileValidators``).
    static func at(_ path: String, partial: String) -> Self? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        let regular = (st.st_mode & S_IFMT) == S_IFREG
        let facts = ExistingFileRule.Facts(
            isRegularFile: regular, partialExists: FileManager.default.fileExists(atPath: partial),
            ownedByUs: st.st_uid == geteuid())
        let validators = regular ? FinishedFileValidators.values(at: path) : nil
        return Self(
            facts: facts, entityTag: validators?.entityTag, lastModified: validators?.lastModified,
            modifiedSeconds: Int64(st.st_mtim.tv_sec), size: Int64(st.st_size))
    }
}

extension DownloadResult {
    /// The result of a run that kept the file at `path` (``ExistingFilePolicy``: `--no-clobber`, or a `304`
    /// to the conditional request), made of what was found there before the run; `url` is the request's.
    static func kept(_ path: String, _ found: ExistingFileRule.Found, url: String) -> DownloadResult {
        DownloadResult(
            path: path, bytes: found.size, resumedFrom: found.size, bytesTransferred: 0, finalURL: url, checksumHex: nil,
            isResumable: false, keptExistingFile: true)
    }
}

extension ExistingFilePolicy {
    /// The policy as the decisions module spells it.
    var rule: ExistingFileRule.Policy {
        switch self {
        case .replace: .replace
        case .keep: .keep
        case .keepIfNotModified: .keepIfNotModified
        }
    }
}
