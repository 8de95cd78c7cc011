"""`python -m moto.server`, with one response of moto 5.2.1 put back the way S3 writes it.

moto 5.2.1 answers CompleteMultipartUpload with the root element `<CompleteMultipartUploadResponse>`
where S3 (and every earlier moto) writes `<CompleteMultipartUploadResult>` (getmoto/moto#10055).
Arrow's S3 client checks that root element (a 200 OK whose body is not the result is S3's way of
reporting a late error), so every upload through pyarrow fails against that version. This module
renames the element in the one response and then runs moto's own server main unchanged.
"""

from __future__ import annotations

import sys


def _patch() -> None:
    from moto.s3.responses import S3Response

    original = S3Response.serialized

    def serialized(self, action_result):
        status, headers, body = original(self, action_result)
        if self.data.get("Action") == "CompleteMultipartUpload" and isinstance(body, (str, bytes)):
            wrong, right = "CompleteMultipartUploadResponse", "CompleteMultipartUploadResult"
            if isinstance(body, bytes):
                body = body.replace(wrong.encode(), right.encode())
            else:
                body = body.replace(wrong, right)
        return status, headers, body

    S3Response.serialized = serialized


if __name__ == "__main__":
    _patch()
    from moto.server import main

    main(sys.argv[1:])
