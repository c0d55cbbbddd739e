/// DownloadKit: resumable downloads over HTTP/1.1 and HTTPS.
public enum DownloadKitVersion {
    /// The library version.
    public static let string = "0.1.0"
}
