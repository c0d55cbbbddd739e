/// The statuses that say the server may answer later (a timeout, too many requests, a server error, a
/// gateway or an overloaded service): a failure with one of them is retried with backoff, and its
/// `Retry-After` counts; any other status ends the download (or asks for a fresh URL, ``URLExpiry``).
package enum TransientStatus {
    /// 408, 429, 500, 502, 503 and 504.
    package static let statuses: Set<Int> = [408, 429, 500, 502, 503, 504]
}
