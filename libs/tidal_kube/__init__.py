"""What Kubernetes writes on the wire, read and written the way it does
(pure): resource quantities (`quantity.py`). Shared by the services that
read or write Kubernetes objects, so none imports another for it."""
