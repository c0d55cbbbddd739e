#if canImport(DownloadKitRuntime)
    import DownloadKitRuntime
#endif
/// An error found while reading, validating or writing a resume-info property list, Apple resume data, or
/// an `NSKeyedArchiver` archive.
///
/// Resume info on disk may be hostile (anything that can write the file can put anything in it), so every
/// problem is reported with this type and never by trapping. Public errors are extensible: a struct wrapping a
/// ``Code`` with static members, so new causes can be added without breaking callers that compare against them.
public struct ResumeInfoError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The category of a resume-info error. Compare against the static members (`.missingKey`, …).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A stable, payload-free name for logs and metrics.
        public let name: String
        /// Creates a code. Codes are declared as static members below.
        public init(_ name: String) { self.name = name }
        public var description: String { name }

        /// The bytes are neither an XML nor a binary property list (or the root is not a dictionary).
        public static let notAPropertyList = Code("notAPropertyList")
        /// A required key is absent; ``ResumeInfoError/key`` names it.
        public static let missingKey = Code("missingKey")
        /// A key holds a value of the wrong type, out of range, or inconsistent with another key;
        /// ``ResumeInfoError/key`` names it.
        public static let invalidValue = Code("invalidValue")
        /// The format version (ours or Apple's) is one this build does not read.
        public static let unsupportedVersion = Code("unsupportedVersion")
        /// The input exceeds a size limit (whole file, one string, element count, nesting depth).
        public static let tooLarge = Code("tooLarge")
        /// An `NSKeyedArchiver` archive is structurally broken: bad UID, cycle, unknown root, depth exceeded.
        public static let malformedArchive = Code("malformedArchive")
        /// Encoding the property list failed.
        public static let encodingFailed = Code("encodingFailed")
        /// A file-system call failed while reading or writing; ``ResumeInfoError/errorNumber`` holds the error number.
        public static let ioFailed = Code("ioFailed")
    }

    /// What went wrong.
    public var code: Code
    /// The property-list key concerned, when there is one (for example `NSURLSessionResumeBytesReceived`).
    public var key: String?
    /// The error number for ``Code/ioFailed``, otherwise `nil`.
    public var errorNumber: DKErrno?
    /// A human-readable explanation that names the cause.
    public var detail: String

    /// ``errorNumber``'s raw C value.
    @available(*, deprecated, renamed: "errorNumber")
    public var errno: Int32? {
        get { errorNumber?.rawValue }
        set { errorNumber = newValue.map(DKErrno.init(rawValue:)) }
    }

    /// Creates an error.
    /// - Parameters:
    ///   - code: The category.
    ///   - key: The property-list key concerned, if any.
    ///   - errorNumber: The error number for I/O failures.
    ///   - detail: A human-readable explanation.
    public init(_ code: Code, key: String? = nil, errorNumber: DKErrno? = nil, _ detail: String) {
        self.code = code
        self.key = key
        self.errorNumber = errorNumber
        self.detail = detail
    }

    /// Creates an error from a raw C error number.
    @available(*, deprecated, renamed: "init(_:key:errorNumber:_:)")
    public init(_ code: Code, key: String? = nil, errno: Int32?, _ detail: String) {
        self.init(code, key: key, errorNumber: errno.map(DKErrno.init(rawValue:)), detail)
    }

    /// A payload-free description for logs and metrics.
    public var shortDescription: String { code.name }

    public var description: String {
        var text = code.name
        if let key { text += " [\(key)]" }
        if let errorNumber { text += " (errno \(errorNumber.rawValue))" }
        return text + ": " + detail
    }

    static func missing(_ key: String) -> ResumeInfoError {
        ResumeInfoError(.missingKey, key: key, "required key \(key) is absent")
    }

    static func invalid(_ key: String, _ detail: String) -> ResumeInfoError {
        ResumeInfoError(.invalidValue, key: key, detail)
    }
}
