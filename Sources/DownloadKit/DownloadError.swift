import DownloadKitDecisions
import Foundation
import Glibc
import HTTPClient
import HTTPWire

/// Why a download failed. One type for every semantic failure of the download layer; transport and
/// wire failures are wrapped with their original error kept in ``underlying``.
///
/// An extensible struct rather than an enum: compare ``code`` with the static members
/// (`error.code == .checksumMismatch`). ``description`` names the cause in plain words.
public struct DownloadError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The category of a download failure.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A stable, payload-free name for logs, metrics and exit-code mapping.
        public let name: String
        @_spi(DownloadKitInternal) public init(_ name: String) { self.name = name }
        public var description: String { name }

        /// The URL could not be parsed or uses a scheme other than http/https.
        public static let invalidURL = Code("invalidURL")
        /// The caller's request cannot be sent: a header field name or value, or the URL, holds a byte
        /// that could split the request (CR, LF, NUL, another control byte), or a framing field.
        /// Refused before connecting; the detail names the header. Not the server's fault.
        public static let invalidRequest = Code("invalidRequest")
        /// The server answered with a status that is not success (the status is in ``DownloadError/httpStatus``).
        public static let httpStatus = Code("httpStatus")
        /// More redirects than allowed.
        public static let tooManyRedirects = Code("tooManyRedirects")
        /// A redirect led back to a URL already visited.
        public static let redirectLoop = Code("redirectLoop")
        /// A redirect went from https to http and downgrades are not allowed, or to a non-HTTP scheme.
        public static let insecureRedirect = Code("insecureRedirect")
        /// A redirect had no usable `Location`.
        public static let invalidRedirect = Code("invalidRedirect")
        /// A 206 whose `Content-Range` did not start where asked or disagreed with the known length.
        public static let contentRangeMismatch = Code("contentRangeMismatch")
        /// The server ignored a range request where that cannot be recovered (segments).
        public static let serverIgnoredRange = Code("serverIgnoredRange")
        /// The body ended before its announced length.
        public static let truncated = Code("truncated")
        /// The caller's checksum did not match the downloaded file.
        public static let checksumMismatch = Code("checksumMismatch")
        /// A piece (``DownloadRequest/pieceChecksums``) failed its check from every source that could
        /// send it (each at most twice); the detail names the piece and its bytes.
        public static let pieceChecksumMismatch = Code("pieceChecksumMismatch")
        /// The caller's ``PieceChecksums`` cannot describe the file: a piece length that is not positive, a
        /// digest of the wrong length, or a count other than ⌈length ÷ pieceLength⌉. Refused before any
        /// byte is written; the detail names the field.
        public static let invalidPieceChecksums = Code("invalidPieceChecksums")
        /// The server's `Content-MD5` did not match the body it sent.
        public static let contentMD5Mismatch = Code("contentMD5Mismatch")
        /// Not enough free space for the remaining bytes (checked before writing).
        public static let insufficientSpace = Code("insufficientSpace")
        /// The disk filled up during the download; every durable byte was kept and the download can resume.
        public static let diskFull = Code("diskFull")
        /// A file-system operation failed (permissions, missing directory, …).
        public static let fileSystem = Code("fileSystem")
        /// A network or TLS failure (see ``DownloadError/underlying``).
        public static let transport = Code("transport")
        /// The server's response broke HTTP/1.1 framing or a header grammar.
        public static let protocolViolation = Code("protocolViolation")
        /// The transfer stayed below the low-speed limit for too long.
        public static let tooSlow = Code("tooSlow")
        /// The resume data or resume info could not be used.
        public static let invalidResumeData = Code("invalidResumeData")
        /// The download was cancelled by the caller.
        public static let cancelled = Code("cancelled")
        /// The download was paused by the caller (the resume data is available).
        public static let paused = Code("paused")
        /// Another download (another `Download`, manager task or process) is writing the same
        /// destination: its partial file is locked. Nothing was touched; retry once it is done.
        public static let destinationInUse = Code("destinationInUse")
        /// A file where the download keeps its working files (partial, record, journal) is not one this
        /// user created: a symbolic link, not a regular file, another user's, writable by others or with
        /// a second hard link (issue #44). Nothing was read from or written to it; the detail names the file.
        public static let untrustedFile = Code("untrustedFile")
        /// The segment map failed its final accounting (a byte missing or credited twice): the file is
        /// not moved into place.
        public static let segmentAccounting = Code("segmentAccounting")
        /// An error of a type the library does not know reached the engine: a bug; the detail names it.
        public static let internalError = Code("internalError")
    }

    /// What went wrong.
    public var code: Code
    /// A sentence that names the cause.
    public var detail: String
    /// The HTTP status when ``code`` is `.httpStatus` (and for failures after a status, where known).
    public var httpStatus: Int?
    /// The lower-level error, when there is one (a `TransportError` or `WireError` description).
    public var underlying: String?
    /// The lower-level error as a value, when there is one: match on it instead of parsing ``underlying``.
    public var cause: Cause?
    /// Whether retrying later from the durable bytes may succeed (reset, timeout, 5xx, 429, …).
    public var isTransient: Bool
    /// For transport failures, the transport error code (e.g. `certificateExpired`).
    public var transportCode: String?
    /// Set on internal signals that the partial data must be discarded and the download restarted.
    var restartReason: RestartReason?
    /// Resume data for the bytes this download kept (the resume-info property list), when it can be
    /// resumed: pass it to ``Download/init(resumingWith:destination:configuration:client:)`` or as
    /// ``DownloadRequest/resumeData``. Like `URLError.downloadTaskResumeData`.
    public var resumeData: Data?

    @_spi(DownloadKitInternal) public init(
        _ code: Code, _ detail: String, httpStatus: Int? = nil, underlying: String? = nil, isTransient: Bool = false,
        transportCode: String? = nil
    ) {
        self.code = code
        self.detail = detail
        self.httpStatus = httpStatus
        self.underlying = underlying
        self.isTransient = isTransient
        self.transportCode = transportCode
    }

    /// A payload-free name for logs and metrics.
    public var shortDescription: String { code.name }

    public var description: String { detail }

    /// What this failure says of the bytes already written, for the stop rule (``StopPolicy``).
    var stopVerdict: StopPolicy.Verdict {
        switch code {
        case .checksumMismatch, .contentMD5Mismatch: .fileWrong
        case .pieceChecksumMismatch: .pieceWrong
        default: .other
        }
    }

    /// Statuses that are worth retrying: 408, 429, 500, 502, 503, 504.
    static func isTransientStatus(_ status: Int) -> Bool {
        TransientStatus.statuses.contains(status)
    }

    static func status(_ status: Int, reason: String, url: HTTPURL) -> DownloadError {
        // A status whose response's phrase was not kept (a segment's 401 reaches here by status alone)
        // still reads "401 Unauthorized".
        let text = reason.isEmpty ? ResponseHead.standardReason(for: status) ?? "" : reason
        let phrase = text.isEmpty ? "" : " \(text)"
        return DownloadError(
            .httpStatus, "HTTP status \(status)\(phrase) from \(url)", httpStatus: status,
            isTransient: isTransientStatus(status))
    }

    /// The request's URL, parsed, after checking the caller's header fields: what a download refuses
    /// before it connects. Error texts name the URL redacted (``HTTPURL/redacting(_:_:)``: no password,
    /// no query value), never as given.
    /// - Throws: ``Code/invalidURL`` naming the URL and the cause, or ``Code/invalidRequest`` naming the
    ///   header field that holds a CR, LF, NUL or other byte the wire refuses.
    static func validatedURL(of request: DownloadRequest) throws(DownloadError) -> HTTPURL {
        let url: HTTPURL
        do {
            url = try HTTPURL(request.url)
        } catch {
            throw DownloadError(.invalidURL, "invalid URL \(HTTPURL.redacting(request.url)): \(error.detail)")
        }
        do {
            try RequestHead.validateFields(request.headers)
        } catch {
            throw invalidRequest(error)
        }
        return url
    }

    /// The request's mirrors, parsed: one that is not an http(s) URL is the caller's error, named by its
    /// position (``DownloadRequest/mirrors``) and its redacted text.
    static func validatedMirrors(of request: DownloadRequest) throws(DownloadError) -> [HTTPURL] {
        var mirrors: [HTTPURL] = []
        for (index, text) in request.mirrors.enumerated() {
            do {
                mirrors.append(try HTTPURL(text))
            } catch {
                throw DownloadError(
                    .invalidURL, "invalid mirror URL \(index + 1) \(HTTPURL.redacting(text)): \(error.detail)")
            }
        }
        return mirrors
    }

    /// A request-side ``WireError`` (``WireError/isCallerInput``) as the caller's fault.
    private static func invalidRequest(_ error: WireError) -> DownloadError {
        DownloadError(
            .invalidRequest, "invalid request (the caller's input, not the server's response): \(error.detail)",
            underlying: error.description
        ).caused(by: .wire(error))
    }

    static func wrap(_ error: any Error) -> DownloadError {
        switch error {
        case let error as DownloadError:
            return error
        case let error as TransportError:
            if error.code == .cancelled {
                return DownloadError(.cancelled, "the download was cancelled").caused(by: .transport(error))
            }
            return DownloadError(
                .transport, transportSentence(error), underlying: error.description, isTransient: error.isTransient,
                transportCode: error.code.name
            ).caused(by: .transport(error))
        case let error as WireError where error.isCallerInput:
            return invalidRequest(error)
        case let error as WireError:
            // A body cut short is a network event worth retrying; other violations are the server's fault.
            if error.isTruncation {
                return DownloadError(
                    .truncated, "the connection closed early: \(error.detail)", underlying: error.description,
                    isTransient: true
                ).caused(by: .wire(error))
            }
            return DownloadError(
                .protocolViolation, "the server sent an invalid response: \(error.detail)",
                underlying: error.description
            ).caused(by: .wire(error))
        case let error as BodyFileWriteError:
            return fileFailure(error.errorNumber, error.description, cause: .bodyWrite(error))
        case let error as FileSystemError:
            return fileFailure(error.errorNumber, error.description, cause: .fileSystem(error))
        case let error as ResumeInfoError:
            // Writing or reading the resume info failed: an I/O failure is a file-system (or disk-full)
            // failure like any other write; a record that does not decode is invalid resume data.
            if error.code == .ioFailed {
                return fileFailure(error.errorNumber, error.description, cause: .resumeInfo(error))
            }
            return DownloadError(.invalidResumeData, "invalid resume info: \(error.description)", underlying: error.description)
                .caused(by: .resumeInfo(error))
        case is CancellationError:
            return DownloadError(.cancelled, "the download was cancelled")
        default:
            // Not one of the library's error types: a programming error somewhere below. Say what it was
            // instead of calling it a file-system error.
            return DownloadError(.internalError, "internal error: \(error)", underlying: "\(error)")
                .caused(by: .other(String(describing: error)))
        }
    }

    /// ENOSPC (and EDQUOT) is a full disk wherever it happens; any other errno a file-system failure.
    private static func fileFailure(_ code: DKErrno?, _ description: String, cause: Cause) -> DownloadError {
        if code?.isDiskFull == true {
            return DownloadError(.diskFull, "the disk is full: \(description)", underlying: description).caused(by: cause)
        }
        return DownloadError(.fileSystem, description, underlying: description).caused(by: cause)
    }

    private func caused(by cause: Cause) -> DownloadError {
        var copy = self
        copy.cause = cause
        return copy
    }

    private static func transportSentence(_ error: TransportError) -> String {
        switch error.code {
        case .certificateExpired, .certificateNotYetValid, .hostnameMismatch, .selfSignedCertificate, .unknownIssuer,
            .certificateVerificationFailed, .weakCertificateKey:
            return "TLS certificate verification failed: \(error.detail)"
        case .connectTimeout, .readTimeout, .writeTimeout:
            return "timeout: \(error.detail)"
        case .resolveFailed:
            return "could not resolve host: \(error.detail)"
        default:
            return error.detail
        }
    }
}
