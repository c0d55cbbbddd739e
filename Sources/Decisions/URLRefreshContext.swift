/// What a URL provider is told when the server refuses the current URL.
public struct URLRefreshContext: Sendable, Hashable {
    /// The download's original URL (its identity).
    public var originalURL: String
    /// The URL that was refused.
    public var currentURL: String
    /// The refusing status: 401, 403, 404 or 410.
    public var status: Int
    /// Durable bytes already downloaded.
    public var bytesReceived: Int64

    /// Creates the context of one refusal.
    package init(originalURL: String, currentURL: String, status: Int, bytesReceived: Int64) {
        self.originalURL = originalURL
        self.currentURL = currentURL
        self.status = status
        self.bytesReceived = bytesReceived
    }
}
