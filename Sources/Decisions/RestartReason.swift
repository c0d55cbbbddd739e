/// Why a download restarted from zero.
public enum RestartReason: String, Sendable, Hashable {
    /// The validator (ETag or Last-Modified) no longer matches: the resource changed.
    case validatorChanged
    /// The server answered a range request with the whole body (200).
    case rangeIgnored
    /// The server's total length differs from the one recorded.
    case lengthChanged
    /// The partial file is longer than the resource (416 with a smaller total).
    case partialLongerThanResource
    /// The partial data could not be trusted (no resume info and no way to validate).
    case unusablePartialData
}
