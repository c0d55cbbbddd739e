import HTTPClient
import HTTPWire

extension DownloadError {
    /// The lower-level error a ``DownloadError`` came from, as a value (not a string).
    public enum Cause: Hashable, Sendable, CustomStringConvertible {
        /// Resolving, connecting, reading, writing or TLS.
        case transport(TransportError)
        /// The server's bytes broke HTTP/1.1 (or the connection ended mid-message).
        case wire(WireError)
        /// A file-system call on the destination, its partial file or its directory.
        case fileSystem(FileSystemError)
        /// Writing the response body into the partial file.
        case bodyWrite(BodyFileWriteError)
        /// Reading or writing the resume info.
        case resumeInfo(ResumeInfoError)
        /// An error of a type the library does not know (a bug; see ``DownloadError/Code/internalError``).
        case other(String)

        public var description: String {
            switch self {
            case .transport(let error): error.description
            case .wire(let error): error.description
            case .fileSystem(let error): error.description
            case .bodyWrite(let error): error.description
            case .resumeInfo(let error): error.description
            case .other(let text): text
            }
        }
    }

    /// What kind of failure this is, for a program's own decisions (the CLI's exit status is one):
    /// one classification for every code, decided here.
    public enum Category: String, Hashable, Sendable, CaseIterable {
        /// The server answered with an HTTP error status.
        case httpStatus
        /// Network failure or timeout: refused, reset, closed early, too slow.
        case network
        /// TLS: handshake, certificate, client identity, pinning.
        case tls
        /// Too many redirects, a loop, https→http, an unsupported target.
        case redirect
        /// The bytes do not match the checksum (the caller's, or the server's Content-MD5).
        case integrity
        /// The server broke HTTP or range rules.
        case protocolViolation
        /// Not enough disk space, or the disk filled up (partial data kept).
        case space
        /// Permissions, a missing directory, unreadable resume data.
        case fileSystem
        /// Another download holds the destination.
        case inUse
        /// Cancelled or paused by the caller.
        case stopped
        /// Anything else: invalid URL, segment accounting, an internal error.
        case other
    }

    /// This error's ``Category``.
    public var category: Category {
        switch code {
        case .httpStatus: return .httpStatus
        case .transport:
            if case .transport(let error) = cause { return error.code.isTLS ? .tls : .network }
            if let transportCode, TransportError.Code(transportCode).isTLS { return .tls }
            return .network
        case .truncated, .tooSlow: return .network
        case .tooManyRedirects, .redirectLoop, .insecureRedirect, .invalidRedirect: return .redirect
        case .checksumMismatch, .contentMD5Mismatch, .pieceChecksumMismatch: return .integrity
        case .contentRangeMismatch, .serverIgnoredRange, .protocolViolation: return .protocolViolation
        case .insufficientSpace, .diskFull: return .space
        case .fileSystem, .invalidResumeData, .untrustedFile: return .fileSystem
        case .destinationInUse: return .inUse
        case .cancelled, .paused: return .stopped
        default: return .other
        }
    }
}

extension WireError {
    /// The connection ended before the message did: a network event worth retrying, not a server's
    /// protocol violation.
    var isTruncation: Bool {
        code == .truncatedBody || code == .incompleteChunkedBody || code == .truncatedHead
            || code == .missingResponseHead
    }
}
