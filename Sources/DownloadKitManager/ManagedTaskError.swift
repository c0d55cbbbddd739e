@_spi(DownloadKitInternal) import DownloadKit
import Foundation
import HTTPClient

/// The error a task stopped with, as the manager keeps and stores it: the download's typed fields
/// (code, category, HTTP status, transient flag, lower-level cause) and the sentence describing it.
///
/// Everything past the manager — the aria2 RPC, the session protocol, the task stores, the CLI —
/// decides from these fields, never from ``message``.
public struct ManagedTaskError: Sendable, Hashable, CustomStringConvertible {
    /// What went wrong: a ``DownloadError/Code`` (`httpStatus`, `diskFull`, …) or one of the manager's own
    /// refusals (``DownloadError/Code/invalidDestination``, ``DownloadError/Code/invalidChecksum``).
    public var code: DownloadError.Code
    /// The failure's category (the CLI's exit status, the aria2 code's first decision).
    public var category: DownloadError.Category
    /// The HTTP status when the server answered with one (`code == .httpStatus`), where known.
    public var httpStatus: Int?
    /// Whether retrying later may succeed (reset, timeout, 5xx, 429, a full disk, …).
    public var isTransient: Bool
    /// The lower-level error, as a serialisable value, when there was one.
    public var cause: Cause?
    /// The sentence describing it (for people; never parsed).
    public var message: String

    /// An error with every field given.
    public init(
        code: DownloadError.Code, category: DownloadError.Category, httpStatus: Int? = nil, isTransient: Bool = false,
        cause: Cause? = nil, message: String
    ) {
        self.code = code
        self.category = category
        self.httpStatus = httpStatus
        self.isTransient = isTransient
        self.cause = cause
        self.message = message
    }

    /// An error with only a code and a message (a refusal, or a row stored before the typed columns): its
    /// category is the one ``DownloadError/category`` gives the code alone (``Category/other`` for a code
    /// this build does not know), no status, not transient, no cause.
    public init(code: DownloadError.Code, message: String) {
        self.init(code: code, category: Self.category(of: code), message: message)
    }

    /// The task's error for a download that failed with `error`.
    public init(_ error: DownloadError) {
        self.init(
            code: error.code, category: error.category, httpStatus: error.httpStatus, isTransient: error.isTransient,
            cause: error.cause.map(Cause.init), message: error.detail)
    }

    /// The error as a ``DownloadError`` (what a task handle throws, what the fleet's worker reports).
    public var downloadError: DownloadError {
        var error = DownloadError(
            code, message, httpStatus: httpStatus, isTransient: isTransient,
            transportCode: cause?.layer == .transport ? cause?.code : nil)
        error.underlying = cause?.description
        return error
    }

    public var description: String { "\(code.name): \(message)" }

    /// The category of a code on its own: ``DownloadError/category``'s one rule (a transport code without a
    /// cause counts as `.network`); the manager's refusals are `.fileSystem` (a destination) and
    /// `.integrity` (a checksum).
    static func category(of code: DownloadError.Code) -> DownloadError.Category {
        switch code {
        case .invalidDestination: .fileSystem
        case .invalidChecksum: .integrity
        default: DownloadError(code, "").category
        }
    }

    /// The lower-level error a task failed with, as a value that survives storage and the wire: the layer,
    /// the lower error's code name and errno, and the system call — enough to tell a timeout, a name that
    /// does not resolve, a file that exists or a directory that cannot be made apart without any text.
    public struct Cause: Sendable, Hashable, Codable, CustomStringConvertible {
        /// Which layer failed (``DownloadError/Cause``'s cases).
        public enum Layer: String, Sendable, Hashable, Codable {
            /// Resolving, connecting, reading, writing or TLS (`TransportError`).
            case transport
            /// The server's bytes broke HTTP/1.1 (`WireError`).
            case wire
            /// A file-system call (`FileSystemError`).
            case fileSystem
            /// Writing the body into the partial file (`BodyFileWriteError`).
            case bodyWrite
            /// Reading or writing the resume info (`ResumeInfoError`).
            case resumeInfo
            /// An error of a type the library does not know.
            case other
        }

        /// The layer that failed.
        public var layer: Layer
        /// The lower error's code name (`connectTimeout`, `truncatedBody`, `ioFailed`), when it has one.
        public var code: String?
        /// The error number captured, when there was one.
        public var errorNumber: DKErrno?
        /// The system call or step that failed (`open`, `mkdir`, `connect`), when known.
        public var operation: String?

        /// The coded form keeps the key `errno` (a bare number), so old and new records read alike.
        private enum CodingKeys: String, CodingKey {
            case layer, code, errorNumber = "errno", operation
        }

        /// ``errorNumber``'s raw C value.
        @available(*, deprecated, renamed: "errorNumber")
        public var errno: Int32? {
            get { errorNumber?.rawValue }
            set { errorNumber = newValue.map(DKErrno.init(rawValue:)) }
        }

        /// A cause with every field given.
        public init(layer: Layer, code: String? = nil, errorNumber: DKErrno? = nil, operation: String? = nil) {
            self.layer = layer
            self.code = code
            self.errorNumber = errorNumber
            self.operation = operation
        }

        /// A cause with a raw C error number.
        @available(*, deprecated, renamed: "init(layer:code:errorNumber:operation:)")
        public init(layer: Layer, code: String? = nil, errno: Int32?, operation: String? = nil) {
            self.init(layer: layer, code: code, errorNumber: errno.map(DKErrno.init(rawValue:)), operation: operation)
        }

        /// The cause of a download error. An unknown error's text is not kept (it may name anything).
        public init(_ cause: DownloadError.Cause) {
            switch cause {
            case .transport(let error):
                self.init(layer: .transport, code: error.code.name, errorNumber: error.errorNumber, operation: error.operation)
            case .wire(let error):
                self.init(layer: .wire, code: error.code.name)
            case .fileSystem(let error):
                self.init(layer: .fileSystem, errorNumber: error.errorNumber, operation: error.operation)
            case .bodyWrite(let error):
                self.init(layer: .bodyWrite, errorNumber: error.errorNumber, operation: "splice")
            case .resumeInfo(let error):
                self.init(layer: .resumeInfo, code: error.code.name, errorNumber: error.errorNumber)
            case .other:
                self.init(layer: .other)
            }
        }

        /// The transport error's code, for a transport cause.
        public var transportCode: TransportError.Code? {
            guard layer == .transport, let code else { return nil }
            return TransportError.Code(code)
        }

        /// Whether the transport timed out (connecting, reading or writing).
        public var isTimeout: Bool {
            guard let code = transportCode else { return false }
            return code == .connectTimeout || code == .readTimeout || code == .writeTimeout
        }

        /// Whether the host name could not be resolved.
        public var isNameResolution: Bool { transportCode == .resolveFailed }

        public var description: String {
            var text = layer.rawValue
            if let code { text += " " + code }
            if let operation { text += " " + operation }
            if let errorNumber { text += " (errno \(errorNumber.rawValue))" }
            return text
        }

        /// The compact form the task stores keep in their `errorCause` / `error_cause` column:
        /// `layer|code|errno|operation`, empty fields for the missing ones. Read and written by hand (a
        /// JSON coder costs ~100 µs a row on Linux).
        public var storageText: String {
            [layer.rawValue, code ?? "", errorNumber.map { String($0.rawValue) } ?? "", operation ?? ""].joined(separator: "|")
        }

        /// A cause read back from ``storageText``; nil for text that is not one (a damaged or hand-edited
        /// row reads as "no cause", never a trap).
        public init?(storageText text: String) {
            let fields = text.split(separator: "|", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 4, let layer = Layer(rawValue: fields[0]), fields[1].utf8.count <= 64,
                fields[3].utf8.count <= 64
            else { return nil }
            let errorNumber: DKErrno?
            if fields[2].isEmpty {
                errorNumber = nil
            } else {
                guard let value = Int32(fields[2]) else { return nil }
                errorNumber = DKErrno(rawValue: value)
            }
            self.init(
                layer: layer, code: fields[1].isEmpty ? nil : fields[1], errorNumber: errorNumber,
                operation: fields[3].isEmpty ? nil : fields[3])
        }
    }
}

extension ManagedTaskError {
    /// An error as a task store reads it back from its columns. The typed columns are optional: a row
    /// written before they existed (code and message only), or one holding values this build does not
    /// know, reads as ``init(code:message:)`` gives it and keeps whatever typed fields do parse. Never
    /// traps: a category that is not one, a status outside 100…999 or a cause that does not parse is
    /// ignored.
    @_spi(DownloadKitInternal) public init(
        storedCode: String, message: String?, category: String?, httpStatus: Int64?, isTransient: Bool?, cause: String?
    ) {
        let code = DownloadError.Code(String(storedCode.prefix(64)))
        self.init(code: code, message: message ?? "")
        if let category, let value = DownloadError.Category(rawValue: category) { self.category = value }
        if let httpStatus, (100...999).contains(httpStatus) { self.httpStatus = Int(httpStatus) }
        if let isTransient { self.isTransient = isTransient }
        self.cause = cause.flatMap(Cause.init(storageText:))
    }
}

extension DownloadError.Code {
    /// A stored task's destination path is not absolute (a foreign or damaged row): the task is restored
    /// failed instead of writing relative to the manager's working directory.
    public static let invalidDestination = DownloadError.Code("invalidDestination")
    /// A stored task's checksum is not `ALGO=HEX` with a known algorithm: the task is restored failed
    /// instead of downloading unverified.
    public static let invalidChecksum = DownloadError.Code("invalidChecksum")
}
