// libFuzzer harness for the resume-info decoder: DownloadKit plists (XML and binary), Apple
// NSURLSession resume data (versions 1–4) and iOS 12+ NSKeyedArchiver archives.
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary with Sources/DownloadKit/{ResumeInfo,
// ResumeInfoError,AppleResumeData,KeyedArchive,FileNaming}.swift (Foundation only).
// The whole input is the file. Properties:
// - decoding never traps, whatever the bytes (typed ResumeInfoError instead);
// - anything accepted re-encodes (binary and XML) without error — encode applies the same validation —
//   and decodes to the same value, up to what the format defines as not stored (`origin`) and the
//   one-second date resolution;
// - anything accepted exports as Apple resume data that decodes to the same URL, byte count and ETag.
import Foundation

func wholeSeconds(_ date: Date) -> Date {
    Date(timeIntervalSinceReferenceDate: date.timeIntervalSinceReferenceDate.rounded(.down))
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-resumeinfo`).
func fuzzResumeInfo(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let input = Data(bytes: data, count: size)
    _ = try? AppleResumeData.decode(input)
    guard let info = try? ResumeInfo.decode(input) else { return 0 }

    var expected = info
    expected.origin = .downloadKit
    expected.created = wholeSeconds(info.created)
    expected.updated = wholeSeconds(info.updated)
    for format in [PropertyListFormat.binary, .xml] {
        let encoded: Data
        do {
            encoded = try info.encoded(format: format)
        } catch {
            check(false, "accepted value does not encode (\(format)): \(error) — \(info)")
            return 0
        }
        do {
            let again = try ResumeInfo.decode(encoded)
            check(again == expected, "round trip (\(format)) changed \(expected) into \(again)")
        } catch {
            check(false, "re-encoded value is refused (\(format)): \(error) — \(info)")
        }
    }
    do {
        let exported = try info.appleResumeData()
        let imported = try ResumeInfo.decode(exported)
        check(imported.currentURL == info.currentURL, "Apple export URL \(imported.currentURL)")
        check(imported.bytesReceived == info.bytesReceived, "Apple export bytes \(imported.bytesReceived)")
        check(imported.entityTag == info.entityTag, "Apple export ETag \(String(describing: imported.entityTag))")
    } catch {
        check(false, "Apple export of an accepted value fails: \(error) — \(info)")
    }
    return 0
}
