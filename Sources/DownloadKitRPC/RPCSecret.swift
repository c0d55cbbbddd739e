import Foundation
import Glibc
import HTTPClient

/// Why a secret file (`--rpc-secret-file`) was not used. Each case names the file.
public enum RPCSecretFileError: Error, Sendable, Hashable, CustomStringConvertible {
    /// It could not be opened or read (the error number of `open`, `fstat` or `read`).
    case unreadable(path: String, errorNumber: DKErrno)
    /// Group or other users have permissions on it (mode shown in octal): they could read or change the secret.
    case tooOpen(path: String, mode: UInt32)
    /// Not a regular file.
    case notRegular(path: String)
    /// Its first line is empty.
    case empty(path: String)

    /// The error number of ``unreadable(path:errorNumber:)``; nil for the other cases.
    public var errorNumber: DKErrno? {
        guard case .unreadable(_, let errorNumber) = self else { return nil }
        return errorNumber
    }

    public var description: String {
        switch self {
        case .unreadable(let path, let errorNumber):
            "--rpc-secret-file \(path): cannot read it (\(errorNumber))"
        case .tooOpen(let path, let mode):
            "--rpc-secret-file \(path): mode \(String(mode & 0o7777, radix: 8)) lets other users read or change it; "
                + "chmod 600 it"
        case .notRegular(let path): "--rpc-secret-file \(path): not a regular file"
        case .empty(let path): "--rpc-secret-file \(path): its first line is empty"
        }
    }
}

/// Where the RPC secret comes from, off the command line: a file only its owner may read, or the
/// environment variable ``environmentVariable``.
public enum RPCSecret {
    /// The environment variable the CLI reads the secret from.
    public static let environmentVariable = "DOWNLOADKIT_RPC_SECRET"
    /// The largest secret file read (the secret is its first line).
    static let maxFileBytes = 64 << 10

    /// The first line of `path` (without its line break). The file must be a regular file with no
    /// permission for group or other (checked on the open descriptor, so a swap after the check is not
    /// read).
    public static func read(fromFile path: String) throws(RPCSecretFileError) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard fd >= 0 else { throw .unreadable(path: path, errorNumber: .current) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .unreadable(path: path, errorNumber: .current) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .notRegular(path: path) }
        guard info.st_mode & 0o077 == 0 else { throw .tooOpen(path: path, mode: info.st_mode) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while bytes.count < maxFileBytes {
            let (count, failure) = retryingInterrupts { buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
            if let failure { throw .unreadable(path: path, errorNumber: failure) }
            if count == 0 { break }
            bytes += buffer[0..<count]
            if buffer[0..<count].contains(0x0A) { break }
        }
        let line = bytes.split(separator: 0x0A, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        let secret = String(decoding: line, as: UTF8.self).trimmingCharacters(in: CharacterSet(charactersIn: "\r"))
        guard !secret.isEmpty else { throw .empty(path: path) }
        return secret
    }
}
