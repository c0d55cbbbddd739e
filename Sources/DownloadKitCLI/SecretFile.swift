import DownloadKitRuntime
import Foundation
import Glibc

/// A file that holds a secret (`--user-file`, `--proxy-user-file`, `--header-file`): read only when it
/// is a regular file owned by the user running `downloadkit` and neither group- nor other-accessible
/// (mode `0600` or `0400`), as ssh does for its keys. Anything else is refused with a
/// ``SecretFileError`` that names the option, the file and the reason; the secret is never read then.
enum SecretFile {
    /// The largest secret file read (a credential line or a few headers).
    static let maximumSize = 64 << 10

    /// The file's text after the checks.
    /// - Parameters:
    ///   - path: The file (a symbolic link is followed; the checks apply to the file it names).
    ///   - option: The option that named it, for the error text.
    /// - Throws: ``SecretFileError``.
    static func read(_ path: String, option: String) throws(SecretFileError) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw SecretFileError(option: option, path: path, reason: .unreadable(errorNumber: .current)) }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else {
            throw SecretFileError(option: option, path: path, reason: .unreadable(errorNumber: .current))
        }
        if let reason = SecretFileError.Reason.refusal(of: status, euid: geteuid()) {
            throw SecretFileError(option: option, path: path, reason: reason)
        }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while bytes.count <= maximumSize {
            let (count, failure) = retryingInterrupts { buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
            if let failure { throw SecretFileError(option: option, path: path, reason: .unreadable(errorNumber: failure)) }
            if count == 0 { break }
            bytes += buffer[..<count]
        }
        guard bytes.count <= maximumSize else { throw SecretFileError(option: option, path: path, reason: .tooLarge) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The first line of the file, without its line end.
    /// - Throws: ``SecretFileError``, with reason `.empty` when the first line is empty.
    static func firstLine(_ path: String, option: String) throws(SecretFileError) -> String {
        let text = try read(path, option: option)
        let line = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }).first ?? ""
        guard !line.isEmpty else { throw SecretFileError(option: option, path: path, reason: .empty) }
        return String(line)
    }
}

/// A secret file that was not read, and why. Its text names the option and the file, never the content.
struct SecretFileError: Error, Equatable, CustomStringConvertible {
    /// Why the file was refused.
    enum Reason: Equatable {
        /// `open`, `fstat` or `read` failed with this error number.
        case unreadable(errorNumber: DKErrno)
        /// Not a regular file.
        case notRegularFile
        /// Owned by another user (this uid).
        case notOwned(owner: UInt32)
        /// Readable, writable or executable by the group or others (these permission bits).
        case tooOpen(mode: UInt32)
        /// More than ``SecretFile/maximumSize`` bytes.
        case tooLarge
        /// No secret on the first line.
        case empty

        /// The reason to refuse a file with this status, for a process with effective uid `euid`; nil
        /// when it may be read.
        static func refusal(of status: stat, euid: uid_t) -> Reason? {
            if status.st_mode & S_IFMT != S_IFREG { return .notRegularFile }
            if status.st_uid != euid { return .notOwned(owner: status.st_uid) }
            if status.st_mode & 0o077 != 0 { return .tooOpen(mode: status.st_mode & 0o777) }
            return nil
        }
    }

    /// The option that named the file (`--user-file`).
    var option: String
    /// The file.
    var path: String
    /// Why it was refused.
    var reason: Reason

    var description: String {
        let why: String
        switch reason {
        case .unreadable(let errorNumber): why = "cannot be read: \(errorNumber)"
        case .notRegularFile: why = "is not a regular file"
        case .notOwned(let owner): why = "is owned by uid \(owner), not by you (uid \(geteuid())): refused"
        case .tooOpen(let mode):
            why = "is accessible by group or others (mode \(String(mode, radix: 8))): refused; chmod 600 it"
        case .tooLarge: why = "is larger than \(SecretFile.maximumSize) bytes"
        case .empty: why = "has no secret on its first line"
        }
        return "\(option) \(path) \(why)"
    }
}
