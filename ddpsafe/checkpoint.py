__all__ = []

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__

# %% ../nbs/74_all.ipynb #b4d7af74
# `ddpsafe.checkpoint`: the names of `ddpsafe.callback.checkpoint`, where its code lives
from .callback.checkpoint import *
from .callback.checkpoint import __all__